"""ImageClassifier: a timm backbone by name with a fresh head, fine-tuned full, as a linear probe, or gradually.

The cached-features head (the frozen backbone run once per image, the head fitted to cached views, flip TTA) is
vision/cached_head.py's CachedHeadClassifier, a subclass: this class is the general one.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from zoo.core.resume import resumed_checkpoint
from zoo.errors import ZooError
from zoo.kit import optim, tb
from zoo.vision import finetune as ft
from zoo.vision.models import create_backbone, head_prefixes

log = logging.getLogger(__name__)

# The cached-features head's options and their defaults: the task config names them under task.module, and every
# checkpoint written before the two classes were split holds them among ImageClassifier's hyper-parameters.
CACHED_HEAD_OPTIONS: dict[str, Any] = {"cache_features": False, "head_fit": "sgd", "l2_grid": None, "l2_folds": 5,
                                       "tta": False, "frozen_jit": False}


class ImageClassifier(pl.LightningModule):
    """A timm backbone (`arch`) with a fresh head of `num_classes`; `finetune`: full | linear_probe | gradual
    (vision/finetune.py). `mean`/`std` normalise the inputs (the data module derives them from the weights).

    Given a cached-features option other than its default (CACHED_HEAD_OPTIONS: what the task config and older
    checkpoints pass to this class), the module built is a CachedHeadClassifier (vision/cached_head.py) instead;
    with the defaults the options are only recorded, so a checkpoint keeps the hyper-parameters it always had."""

    input_memory_format = torch.contiguous_format  # zoo.core.trainer.prepare_module sets channels_last

    def __new__(cls, *args: Any, **kwargs: Any) -> ImageClassifier:
        if cls is ImageClassifier and any(k in CACHED_HEAD_OPTIONS and v != CACHED_HEAD_OPTIONS[k]
                                          for k, v in kwargs.items()):
            from zoo.vision.cached_head import CachedHeadClassifier

            cls = CachedHeadClassifier
        return super().__new__(cls)

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
        optimizer: Any = None,
        scheduler: Any = None,
        **cached_head: Any,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        unknown = sorted(set(cached_head) - set(CACHED_HEAD_OPTIONS))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments: {', '.join(unknown)}")
        if finetune not in ft.STRATEGIES:
            raise ZooError(f"unknown finetune strategy '{finetune}': use one of {', '.join(ft.STRATEGIES)}")
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
        self.phases = ft.PhaseLog()  # val acc per epoch and phase, for the line that says which one was kept

    # ------------------------------------------------------------------ inference
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W), normalised -> logits (B, num_classes)."""
        return self.model(images)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With trainer.channels_last the images follow the weights' layout, converted once on the device: a
        contiguous input would otherwise be converted inside the first convolution of every step."""
        if self.input_memory_format != torch.contiguous_format and isinstance(batch, (list, tuple)) \
                and batch and isinstance(batch[0], torch.Tensor) and batch[0].dim() == 4:
            batch = [batch[0].contiguous(memory_format=self.input_memory_format), *batch[1:]]
        return batch

    # ------------------------------------------------------------------ steps
    def _logits(self, batch: tuple, stage: str) -> torch.Tensor:
        return self(batch[0])

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
        return self.shared_step(batch, "train")[0]

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

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        factor = 1.0
        if self.hparams.finetune == "gradual":
            factor = ft.backbone_factor(epoch, batch_idx, self.trainer.num_training_batches,
                                        self.hparams.unfreeze_epoch, self.hparams.unfreeze_warmup)
        ft.step_scaled(optimizer, lambda: optimizer.step(closure=optimizer_closure), factor)

    # ------------------------------------------------------------------ epoch hooks
    def on_fit_start(self) -> None:
        if self.hparams.finetune == "gradual" and self.trainer.is_global_zero:
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
        checkpoint["vision_run"] = {"phases": self.phases.entries}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.phases.entries = [tuple(e) for e in checkpoint.get("vision_run", {}).get("phases", [])]

    def gradual_plan(self, feats: str = "the backbone's features", note: str = "") -> str:
        """One line for the start of a gradual run: which epochs train what, on what (`feats`), and a `note`."""
        hp, epochs = self.hparams, self.trainer.max_epochs or -1
        head = f"epochs 0-{hp.unfreeze_epoch - 1}" if hp.unfreeze_epoch > 1 else "epoch 0"
        head = f"{head} train the head on {feats}, " if hp.unfreeze_epoch > 0 else ""
        if 0 < epochs <= hp.unfreeze_epoch:
            return f"finetune=gradual: {head.rstrip(', ')}; the backbone never opens (max_epochs){note}"
        bn = "its pretrained BatchNorm statistics kept" if self.keep_bn_stats else "BatchNorm statistics updated"
        rest = (f"from epoch {hp.unfreeze_epoch}" if epochs <= 0 else f"epoch {hp.unfreeze_epoch}"
                if epochs - 1 == hp.unfreeze_epoch else f"epochs {hp.unfreeze_epoch}-{epochs - 1}")
        warm = f", warmed up over {hp.unfreeze_warmup:g} epoch(s)" if hp.unfreeze_warmup > 0 else ""
        return (f"finetune=gradual: {head}{rest} the whole network (the backbone at {hp.backbone_lr_scale:g}x the "
                f"rate{warm}, {bn}){note}")

    def on_test_start(self) -> None:
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
        from zoo.vision.viz import captioned_grid

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
            from zoo.vision.viz import confusion_figure

            tb.log_figure(self, "test/confusion_matrix", confusion_figure(matrix, self.class_names))

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> Any:
        groups = ft.groups(self.model, self.heads, self.hparams.finetune, self.hparams.weight_decay,
                           self.hparams.backbone_lr_scale, self.no_decay)
        return optim.configure(self, groups)
