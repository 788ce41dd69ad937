"""ImageClassifier: a timm backbone with a fresh head, fine-tuned full, as a linear probe, or gradually."""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from vision import finetune as ft
from vision import frozen
from vision import headfit as hf
from vision.models import create_backbone, head_prefixes
from zoo.core.resume import resumed_checkpoint
from zoo.errors import ZooError
from zoo.kit import optim, tb

log = logging.getLogger(__name__)


class ImageClassifier(pl.LightningModule):
    input_memory_format = torch.contiguous_format  # zoo.core.trainer.prepare_module sets channels_last

    def __init__(
        self,
        arch: str = "resnet18",
        num_classes: int = 10,
        class_names: list[str] | None = None,
        in_chans: int = 3,
        image_size: int = 224,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        pretrained: bool | str = "auto",
        finetune: str = "full",
        unfreeze_epoch: int = 1,
        unfreeze_warmup: float = 0.0,
        backbone_lr_scale: float = 1.0,
        weight_decay: float = 0.05,
        label_smoothing: float = 0.0,
        drop_rate: float = 0.0,
        log_images: int = 16,
        cache_features: bool = False,
        head_fit: str = "sgd",
        l2_grid: list[float] | None = None,
        l2_folds: int = 5,
        tta: bool | str = False,
        frozen_jit: bool = False,
        optimizer: Any = None,
        scheduler: Any = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        if finetune not in ft.STRATEGIES:
            raise ZooError(f"unknown finetune strategy '{finetune}': use one of {', '.join(ft.STRATEGIES)}")
        if cache_features and finetune == "full":
            raise ZooError("task.module.cache_features=true needs a frozen backbone (finetune=linear_probe, or "
                           "gradual until unfreeze_epoch), not finetune=full; set task.module.cache_features=false")
        hf.check_options(head_fit, cache_features, tta, l2_grid, l2_folds)
        if not isinstance(frozen_jit, bool):  # a string such as "maybe" would be truthy
            raise ZooError(f"task.module.frozen_jit must be true or false, got '{frozen_jit}'")
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        resumed = resumed_checkpoint()
        if resumed is not None and resumed["pretrained_report"]:
            # a resume: its checkpoint restores every tensor next, so the architecture only (no weights read), and
            # what the run began from as its checkpoint recorded it
            self.model, _ = create_backbone(arch, num_classes, in_chans, False, drop_rate)
            source = str(resumed["pretrained_report"]["line"])
        else:
            self.model, source = create_backbone(arch, num_classes, in_chans, pretrained, drop_rate)
        self.pretrained_report = {"source": str(pretrained), "line": source}  # zoo.kit.pretrained.PretrainedReport
        # pretrained BatchNorm statistics are what the head is fitted to: kept after unfreezing (vision/finetune.py);
        # a randomly initialised backbone has none worth keeping, so its BatchNorm trains once it opens
        self.keep_bn_stats = not source.startswith("random init")
        self.heads = head_prefixes(self.model)
        self.no_decay = optim.no_decay_names(self.model)  # by name and layer type, before any FSDP wrapping
        if finetune == "linear_probe":
            ft.freeze_for_probe(self.model, self.heads)
        self.class_names = list(class_names or [str(i) for i in range(num_classes)])
        self.register_buffer("mean", torch.tensor(mean or [0.5] * in_chans).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std or [0.5] * in_chans).view(1, -1, 1, 1), persistent=False)
        self.metrics = torch.nn.ModuleDict({
            f"{stage}_acc": MulticlassAccuracy(num_classes, average="micro") for stage in ("train", "val", "test")
        })
        if num_classes > 5:
            for stage in ("val", "test"):
                self.metrics[f"{stage}_top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
        self.confusion = MulticlassConfusionMatrix(num_classes)
        self._samples: list[tuple] = []
        self._features: dict[tuple, torch.Tensor] = {}  # cache_features: (stage, sample index[, view]) -> pooled
        self._train_labels: dict[int, int] = {}  # head_fit=lbfgs: sample index -> class, for the fit
        # frozen_jit: the frozen backbone as an inference graph (vision/frozen.py); in a dict, not a submodule
        self._graph: dict[str, Any] = {}
        self.tta_flip = tta is True  # head_fit=lbfgs with tta=auto decides at each fit; checkpoints keep it
        self.phases = ft.PhaseLog()  # val acc per epoch and phase, for the line that says which one was kept

    # ------------------------------------------------------------------ inference
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W), normalised -> logits (B, num_classes); with flip TTA, the mean of the logits of the
        images and of their mirror images."""
        logits = self.model(images)
        return (logits + self.model(images.flip(-1))) / 2 if self.tta_flip else logits

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With trainer.channels_last the images follow the weights' layout, converted once on the device: a
        contiguous input would otherwise be converted inside the first convolution of every step."""
        if self.input_memory_format != torch.contiguous_format and isinstance(batch, (list, tuple)) \
                and batch and isinstance(batch[0], torch.Tensor) and batch[0].dim() == 4:
            batch = [batch[0].contiguous(memory_format=self.input_memory_format), *batch[1:]]
        return batch

    # ------------------------------------------------------------------ steps
    def _logits(self, batch: tuple, stage: str) -> torch.Tensor:
        """Logits for the batch; with cache_features, the frozen backbone runs once per sample while it is frozen."""
        if not self.hparams.cache_features or not self.backbone_frozen():
            return self.model(batch[0]) if stage == "train" else self(batch[0])  # no TTA while training
        keys = [(stage, i) for i in self._indices(batch)]
        head = self.model.get_classifier()
        pooled = F.dropout(self._pooled(batch[0], keys), self.hparams.drop_rate, training=self.training)
        logits = head(pooled)
        if stage != "train" and self.tta_flip:
            logits = (logits + head(self._pooled(batch[0], [(*k, "flip") for k in keys], flip=True))) / 2
        return logits

    def _indices(self, batch: tuple) -> list[int]:
        if len(batch) < 3:
            raise ZooError("task.module.cache_features=true needs batches with sample indices: set "
                           "task.data.cache_features=true as well (the task config links the two)")
        return batch[2].tolist()

    def _pooled(self, images: torch.Tensor, keys: list[tuple], flip: bool = False) -> torch.Tensor:
        """The frozen backbone's pooled features (B, num_features), computed only for keys not yet cached."""
        todo = [j for j, k in enumerate(keys) if k not in self._features]
        if todo:
            x = images[todo].flip(-1) if flip else images[todo]
            with torch.no_grad():
                self.model.eval()  # no dropout in what is cached
                pooled = self._frozen_forward(x)
                self.train(self.training)  # back, with the frozen backbone's BatchNorm rule
            self._features.update({keys[j]: f for j, f in zip(todo, pooled)})
        return torch.stack([self._features[k] for k in keys])

    def _frozen_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled features of the frozen backbone (in eval mode); with frozen_jit, through a graph built at the first
        batch and kept until the backbone may change (`drop_graph`)."""
        if self.hparams.frozen_jit and frozen.usable(x):
            if "fn" not in self._graph and not frozen.modes_active():
                self._graph["fn"] = frozen.pooled_graph(self.model, x)  # None: eager from here on
            if self._graph.get("fn") is not None:
                out = self._graph["fn"](x)
                if len(out) == len(x):
                    return out
                log.info("frozen backbone back in eager mode: its graph returned %d rows for %d", len(out), len(x))
                self._graph["fn"] = None
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    def drop_graph(self) -> None:
        """The backbone's weights may change (it opens, a checkpoint is loaded): the graph's copies are stale."""
        self._graph.clear()

    def _cache_views(self, batch: tuple) -> None:
        """head_fit=lbfgs, frozen epochs: this epoch's (augmented) view of each photo and its mirror image."""
        idx, epoch = self._indices(batch), self.current_epoch
        for flip in (0, 1):
            self._pooled(batch[0], [("train", i, epoch, flip) for i in idx], flip=bool(flip))
        self._train_labels.update(zip(idx, batch[1].tolist()))

    def shared_step(self, batch: tuple, stage: str) -> tuple[torch.Tensor, torch.Tensor]:
        y = batch[1]
        logits = self._logits(batch, stage)
        loss = F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing if stage == "train" else 0.0)
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, sync_dist=not on_step)
        self.metrics[f"{stage}_acc"](logits, y)
        self.log(f"{stage}/acc", self.metrics[f"{stage}_acc"], on_step=False, on_epoch=True, prog_bar=True)
        if f"{stage}_top5" in self.metrics:
            self.metrics[f"{stage}_top5"](logits, y)
            self.log(f"{stage}/top5", self.metrics[f"{stage}_top5"], on_step=False, on_epoch=True)
        return loss, logits

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor | None:
        if self.fits_head():
            self._cache_views(batch)
            return None  # no optimizer step: the head is fitted when the epoch's views are all cached
        return self.shared_step(batch, "train")[0]

    def fits_head(self) -> bool:
        """head_fit=lbfgs while the backbone is frozen: epochs cache views, the head is fitted at their end."""
        return self.hparams.head_fit == "lbfgs" and self.backbone_frozen()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.fits_head() and batch_idx + 1 >= self.trainer.num_training_batches:
            self._complete_views()
            self.fit_head()

    def _complete_views(self) -> None:
        """A run resumed mid-way through a cached epoch goes on with that epoch's remaining batches in a new shuffle,
        so some photos get no view of it: they get one here, from the training set, before the fit (the views cached
        before the stop came back with the checkpoint). Nothing to do in a run that was not stopped."""
        epoch, loader = self.current_epoch, self.trainer.train_dataloader
        missing = [i for i in sorted(self._train_labels) if ("train", i, epoch, 1) not in self._features]
        dataset = getattr(loader, "dataset", None)
        if not missing or dataset is None:
            return
        size = getattr(loader, "batch_size", None) or 32
        for start in range(0, len(missing), size):
            items = [dataset[i] for i in missing[start:start + size]]
            x = torch.stack([item[0] for item in items]).to(self.device)
            labels, idx = (torch.tensor([int(item[k]) for item in items]) for k in (1, 2))
            self._cache_views(self.on_after_batch_transfer([x, labels, idx], 0))

    def fit_head(self) -> hf.HeadFit:
        """Fit the head to every cached view so far (L2 by cross-validation over the training photos)."""
        feats, labels = hf.stack_views(self._features, self._train_labels)
        hp = self.hparams
        threads, start = torch.get_num_threads(), time.perf_counter()
        torch.set_num_threads(1)  # small matrices: a 2nd thread made the fits 3x slower on a loaded 2-core CPU
        try:
            fit = hf.fit_head(feats, labels, hp.num_classes, tuple(hp.l2_grid or hf.L2_GRID), hp.l2_folds)
        finally:
            torch.set_num_threads(threads)
        classifier = self.model.get_classifier()
        with torch.no_grad():
            classifier.weight.copy_(fit.weight.to(classifier.weight))
            classifier.bias.copy_(fit.bias.to(classifier.bias))
        if hp.tta == "auto":
            self.tta_flip = fit.flip_pays
        line = f"epoch {self.current_epoch}: {fit.line(self.tta_flip)} ({time.perf_counter() - start:.1f} s)"
        if self.trainer.is_global_zero:
            print(f"zoo: {line}", flush=True)
        tb.log_text(self, "train/head_fit", line)
        return fit

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        _, logits = self.shared_step(batch, "val")
        if self.hparams.log_images:
            self._keep_samples(batch[0], logits.argmax(-1), batch[1])

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        _, logits = self.shared_step(batch, "test")
        self.confusion(logits, batch[1])

    def _keep_samples(self, x: torch.Tensor, pred: torch.Tensor, true: torch.Tensor) -> None:
        """For the image grid: the first image of each class, then mistakes (val sets are often sorted by class,
        so the first batch alone would show one class)."""
        n, classes = self.hparams.log_images, self.hparams.num_classes
        seen = {t for _, _, t in self._samples}
        for i, (p, t) in enumerate(zip(pred.tolist(), true.tolist())):
            unseen_slots = min(n, classes) - len(seen)  # kept free for classes still to come
            if t not in seen or (p != t and len(self._samples) < n - max(0, unseen_slots)):
                self._samples.append((x[i].detach().cpu(), p, t))
                seen.add(t)
            if len(self._samples) >= n:
                return

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self(x).softmax(-1)

    # ------------------------------------------------------------------ freezing (see vision/finetune.py)
    def backbone_frozen(self) -> bool:
        """linear_probe: always; gradual: before unfreeze_epoch. From current_epoch alone, so right after a resume."""
        return self.hparams.finetune == "linear_probe" or (
            self.hparams.finetune == "gradual" and self.current_epoch < self.hparams.unfreeze_epoch)

    def backbone_bn_frozen(self) -> bool:
        """The backbone's BatchNorm stays in eval mode: while it is frozen, and for gradual, after it opens too."""
        return self.backbone_frozen() or (self.hparams.finetune == "gradual" and self.keep_bn_stats)

    def train(self, mode: bool = True) -> ImageClassifier:
        super().train(mode)
        if mode and self.backbone_bn_frozen():
            ft.set_backbone_bn_eval(self.model, self.heads)
        return self

    def on_train_start(self) -> None:
        self.train()  # a resume from a mid-epoch checkpoint skips on_train_epoch_start

    def on_train_epoch_start(self) -> None:
        self.train()  # re-applies the BatchNorm rule at the unfreeze boundary
        if not self.backbone_frozen():
            self._features.clear()  # the backbone trains from here: its cached features are stale
            self.drop_graph()

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        factor = 1.0
        if self.hparams.finetune == "gradual":
            factor = ft.backbone_factor(epoch, batch_idx, self.trainer.num_training_batches,
                                        self.hparams.unfreeze_epoch, self.hparams.unfreeze_warmup)
        ft.step_scaled(optimizer, lambda: optimizer.step(closure=optimizer_closure), factor)

    # ------------------------------------------------------------------ epoch hooks
    def on_fit_start(self) -> None:
        self.drop_graph()
        hp = self.hparams
        if hp.cache_features and hp.finetune == "gradual" and self.trainer.world_size > 1:
            # the cached epochs give the backbone no gradients, which DDP's reducer waits for
            raise ZooError("task.module.cache_features=true with finetune=gradual runs on one device; with "
                           f"{self.trainer.world_size} processes set task.module.cache_features=false")
        if hp.head_fit == "lbfgs" and self.trainer.world_size > 1:
            raise ZooError("task.module.head_fit=lbfgs fits the head on one device; with "
                           f"{self.trainer.world_size} processes set task.module.head_fit=sgd")
        if hp.head_fit == "lbfgs":  # the cached epochs skip the optimizer on purpose (training_step returns None)
            warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
        if hp.finetune == "gradual" and self.trainer.is_global_zero:
            print(f"zoo: {self.gradual_plan()}", flush=True)
        if (self.device.type == "cpu" and "bf16" in str(self.trainer.precision)
                and self.hparams.image_size < 32 and "resnet" in self.hparams.arch):
            # torch's bf16 CPU conv backward returns garbage weight gradients on 1x1 maps (docs/vision.md)
            log.warning("bf16-mixed on CPU with %d px images gives ResNet's last stage 1x1 maps, where torch's bf16 "
                        "CPU conv backward is unreliable (docs/vision.md); use task.data.image_size>=32 or "
                        "trainer.precision=32-true", self.hparams.image_size)

    def on_train_end(self) -> None:
        line = self.phases.kept_line()
        if line and self.hparams.finetune == "gradual" and self.trainer.is_global_zero:
            print(f"zoo: {line}", flush=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["vision_run"] = {"tta_flip": self.tta_flip, "phases": self.phases.entries}
        if self._train_labels and self.fits_head():  # cached epochs: a resume fits the head to every view so far
            checkpoint["vision_run"]["views"] = hf.pack_views(self._features, self._train_labels)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.drop_graph()
        state = checkpoint.get("vision_run", {})
        self.tta_flip = bool(state.get("tta_flip", self.tta_flip))
        self.phases.entries = [tuple(e) for e in state.get("phases", [])]
        if "views" in state:
            features, labels = hf.unpack_views(state["views"])
            self._features.update(features)
            self._train_labels.update(labels)

    def gradual_plan(self) -> str:
        """One line for the start of a gradual run: which epochs train what, on what."""
        hp, epochs = self.hparams, self.trainer.max_epochs or -1
        if hp.head_fit == "lbfgs":
            augmented = bool(getattr(getattr(self.trainer, "datamodule", None), "augment", False))
            return ft.fit_then_tune_plan(hp, epochs, self.keep_bn_stats, augmented)
        head = f"epochs 0-{hp.unfreeze_epoch - 1}" if hp.unfreeze_epoch > 1 else "epoch 0"
        feats = "cached features" if hp.cache_features else "the backbone's features"
        head = f"{head} train the head on {feats}, " if hp.unfreeze_epoch > 0 else ""
        aug = "; images not augmented (cache_features)" if hp.cache_features else ""
        if 0 < epochs <= hp.unfreeze_epoch:
            return f"finetune=gradual: {head.rstrip(', ')}; the backbone never opens (max_epochs){aug}"
        bn = "its pretrained BatchNorm statistics kept" if self.keep_bn_stats else "BatchNorm statistics updated"
        rest = (f"from epoch {hp.unfreeze_epoch}" if epochs <= 0 else f"epoch {hp.unfreeze_epoch}"
                if epochs - 1 == hp.unfreeze_epoch else f"epochs {hp.unfreeze_epoch}-{epochs - 1}")
        warm = f", warmed up over {hp.unfreeze_warmup:g} epoch(s)" if hp.unfreeze_warmup > 0 else ""
        return (f"finetune=gradual: {head}{rest} the whole network (the backbone at {hp.backbone_lr_scale:g}x the "
                f"rate{warm}, {bn}){aug}")

    def on_test_start(self) -> None:
        self.drop_graph()
        datamodule = getattr(self.trainer, "datamodule", None)
        if getattr(datamodule, "test_is_val", False):
            line = ("test/* is measured on the validation images, which chose the checkpoint: not an independent "
                    f"estimate (add {datamodule.root}/test/<class>/ for one)")
            if self.trainer.is_global_zero:
                print(f"zoo: {line}", flush=True)
            tb.log_text(self, "test/split", line)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and self.trainer.state.fn == "fit":
            phase = "frozen" if self.backbone_frozen() else "whole network"
            self.phases.add(self.current_epoch, float(self.metrics["val_acc"].compute()), phase)
        samples, self._samples = self._samples, []
        if not samples or self.trainer.sanity_checking:
            return
        from vision.viz import captioned_grid

        samples.sort(key=lambda s: s[2])  # by true class
        x = torch.stack([s[0] for s in samples])
        images = (x * self.std.cpu() + self.mean.cpu()).clamp(0, 1)
        names = self.class_names
        tb.log_image(self, "val/predicted_true",
                     captioned_grid(images, [(names[p], names[t]) for _, p, t in samples]))

    def on_test_epoch_end(self) -> None:
        matrix = self.confusion.compute()
        self.confusion.reset()
        if self.trainer.is_global_zero:
            from vision.viz import confusion_figure

            tb.log_figure(self, "test/confusion_matrix", confusion_figure(matrix, self.class_names))

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> Any:
        groups = ft.groups(self.model, self.heads, self.hparams.finetune, self.hparams.weight_decay,
                           self.hparams.backbone_lr_scale, self.no_decay)
        return optim.configure(self, groups)
