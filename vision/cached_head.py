"""CachedHeadClassifier: the ImageClassifier of a frozen backbone that runs once per image, its pooled features
cached, and a head trained on them, by the optimizer (`head_fit=sgd`) or fitted to all cached views by L2-regularised
logistic regression (`head_fit=lbfgs`, vision/headfit.py); flip TTA; the frozen backbone as an inference graph
(`frozen_jit`, vision/frozen.py). What experiment=vision_imagefolder and vision_flowers12 train (docs/vision.md).

ImageClassifier builds this class when given any of these options (vision/module.py, CACHED_HEAD_OPTIONS), so the
task config and every checkpoint saved as `zoo.vision.module.ImageClassifier` with them keep working.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from zoo.errors import ZooError
from zoo.kit import tb
from zoo.vision import finetune as ft
from zoo.vision import frozen
from zoo.vision import headfit as hf
from zoo.vision.module import ImageClassifier

log = logging.getLogger(__name__)


class CachedHeadClassifier(ImageClassifier):
    """ImageClassifier's arguments (`**general`), and: `cache_features` (the frozen backbone's pooled features kept
    per sample: batches carry sample indices), `head_fit` (sgd | lbfgs), `l2_grid` and `l2_folds` (lbfgs: the L2
    strengths the folds choose from), `tta` (flip TTA: true | false | auto, auto decided by the lbfgs folds),
    `frozen_jit` (the cached forwards through an optimised graph)."""

    def __init__(self, *, cache_features: bool = False, head_fit: str = "sgd", l2_grid: list[float] | None = None,
                 l2_folds: int = 5, tta: bool | str = False, frozen_jit: bool = False, **general: Any) -> None:
        if cache_features and general.get("finetune", "full") == "full":  # ImageClassifier's default finetune
            raise ZooError("task.module.cache_features=true needs a frozen backbone (finetune=linear_probe, or "
                           "gradual until unfreeze_epoch), not finetune=full; set task.module.cache_features=false")
        hf.check_options(head_fit, cache_features, tta, l2_grid, l2_folds)
        if not isinstance(frozen_jit, bool):  # a string such as "maybe" would be truthy
            raise ZooError(f"task.module.frozen_jit must be true or false, got '{frozen_jit}'")
        super().__init__(**general)  # records these options among the hyper-parameters too
        self._features: dict[tuple, torch.Tensor] = {}  # (stage, sample index[, epoch, flip]) -> pooled features
        self._train_labels: dict[int, int] = {}  # head_fit=lbfgs: sample index -> class, for the fit
        # frozen_jit: the frozen backbone as an inference graph (vision/frozen.py); in a dict, not a submodule
        self._graph: dict[str, Any] = {}
        self.tta_flip = tta is True  # head_fit=lbfgs with tta=auto decides at each fit; checkpoints keep it

    # ------------------------------------------------------------------ inference
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """With flip TTA, the mean of the logits of the images and of their mirror images."""
        logits = self.model(images)
        return (logits + self.model(images.flip(-1))) / 2 if self.tta_flip else logits

    # ------------------------------------------------------------------ cached features
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

    # ------------------------------------------------------------------ the fitted head (head_fit=lbfgs)
    def _cache_views(self, batch: tuple) -> None:
        """head_fit=lbfgs, frozen epochs: this epoch's (augmented) view of each photo and its mirror image."""
        idx, epoch = self._indices(batch), self.current_epoch
        for flip in (0, 1):
            self._pooled(batch[0], [("train", i, epoch, flip) for i in idx], flip=bool(flip))
        self._train_labels.update(zip(idx, batch[1].tolist()))

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

    # ------------------------------------------------------------------ epoch hooks
    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        if not self.backbone_frozen():
            self._features.clear()  # the backbone trains from here: its cached features are stale
            self.drop_graph()

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
        super().on_fit_start()

    def on_test_start(self) -> None:
        self.drop_graph()
        super().on_test_start()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["vision_run"]["tta_flip"] = self.tta_flip
        if self._train_labels and self.fits_head():  # cached epochs: a resume fits the head to every view so far
            checkpoint["vision_run"]["views"] = hf.pack_views(self._features, self._train_labels)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self.drop_graph()
        state = checkpoint.get("vision_run", {})
        self.tta_flip = bool(state.get("tta_flip", self.tta_flip))
        if "views" in state:
            features, labels = hf.unpack_views(state["views"])
            self._features.update(features)
            self._train_labels.update(labels)

    def gradual_plan(self, feats: str = "the backbone's features", note: str = "") -> str:
        hp = self.hparams
        if hp.head_fit == "lbfgs":
            augmented = bool(getattr(getattr(self.trainer, "datamodule", None), "augment", False))
            return ft.fit_then_tune_plan(hp, self.trainer.max_epochs or -1, self.keep_bn_stats, augmented)
        if hp.cache_features:
            feats, note = "cached features", f"; images not augmented (cache_features){note}"
        return super().gradual_plan(feats, note)
