"""How generated images are judged offline: the evaluator networks (features for the Fréchet distance, labels for
class coverage) and `Judge`, the plain object the GAN module measures itself with.

Evaluator networks, in order of preference:
1. a classifier checkpoint trained on the same data (e.g. from `task=vision/resnet`), read through
   zoo.core.checkpoint.load_checkpoint: a timm model created by the name in hparams["arch"], weights under state_dict
   keys "model.*" (the full contract: docs/architecture.md, "The GAN evaluator's contract with vision checkpoints");
2. otherwise, for labelled data, a small CNN trained here on the GAN's own train split, cached on disk;
3. for unlabelled data without a checkpoint, the same CNN with fixed random weights (random-feature FD: a weaker
   but still monotone quality signal; no class coverage).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from zoo.core.checkpoint import load_checkpoint
from zoo.errors import ZooError
from zoo.gan.frechet import ClassCounts, FrechetDistance

log = logging.getLogger(__name__)
RECIPE = "smallcnn-v1"  # bump when the fallback classifier or its training changes: invalidates the cache


class Evaluator(nn.Module):
    """x (B, C, H, W) in [-1, 1] -> (features (B, D), logits (B, K) or None)."""

    num_features: int
    num_classes: int

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError


class SmallCNN(Evaluator):
    def __init__(self, channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        block = lambda i, o: [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(True)]  # noqa: E731
        self.body = nn.Sequential(*block(channels, width), nn.MaxPool2d(2), *block(width, 2 * width), nn.MaxPool2d(2),
                                  *block(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.num_features, self.num_classes = 4 * width, num_classes
        self.head = nn.Linear(4 * width, num_classes) if num_classes else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        f = self.body(x)  # (B, 4w)
        return f, (self.head(f) if self.head is not None else None)


class TimmClassifier(Evaluator):
    """A zoo vision checkpoint's timm model; inputs mapped from [-1, 1] to its size, channels and normalisation."""

    def __init__(self, model: nn.Module, in_chans: int, image_size: int | None, mean: list[float],
                 std: list[float]) -> None:
        super().__init__()
        self.model, self.in_chans, self.image_size = model, in_chans, image_size
        self.num_features, self.num_classes = model.num_features, model.num_classes
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = (x + 1) / 2  # [0, 1]
        if x.shape[1] != self.in_chans:
            x = x.expand(-1, self.in_chans, -1, -1)  # grey data, RGB classifier (checked compatible at load)
        if self.image_size and x.shape[-1] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        f = self.model.forward_head(self.model.forward_features((x - self.mean) / self.std), pre_logits=True)
        return f, self.model.get_classifier()(f)


def load_classifier_checkpoint(path: str, channels: int, num_classes: int,
                               class_names: list[str] | None = None) -> TimmClassifier:
    """A zoo vision checkpoint as an evaluator; ZooError when it cannot judge this data.

    The contract with `task=vision/*` checkpoints (docs/architecture.md, "The GAN evaluator's contract"): the file
    is read by zoo.core.checkpoint.load_checkpoint; the network is `timm.create_model(hparams["arch"])` with the weights
    under state_dict "model.*"; classes from the head's weight rows (else hparams["num_classes"]), input channels
    from hparams["in_chans"] (else the stem conv), and hparams "class_names", "mean", "std", "image_size" (else the
    same keys of checkpoint["zoo"]["config"]["task"]["data"]).
    """
    import timm

    p = Path(path)
    if not p.is_file():
        raise ZooError(f"evaluation classifier checkpoint {path} not found; train one with task=vision/resnet or "
                       f"leave task.module.eval_classifier=null for the built-in classifier")
    ckpt = load_checkpoint(p)
    hp = ckpt.get("hyper_parameters", {})
    data_cfg = ((ckpt.get("zoo") or {}).get("config") or {}).get("task", {}).get("data") or {}
    arch = hp.get("arch")
    state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    if not arch or not state:
        raise ZooError(f"{path} is not a timm classifier checkpoint (needs hparams 'arch' and 'model.*' weights); "
                       f"use a task=vision checkpoint")
    try:
        model = timm.create_model(arch, pretrained=False)
        stem = next(v for v in state.values() if v.ndim == 4)  # first conv (out, in_chans, k, k)
        in_chans = int(hp.get("in_chans") or stem.shape[1])
        head = model.get_classifier()
        head_keys = [k for k, v in model.named_parameters() if v is head.weight]
        k_classes = state[head_keys[0]].shape[0] if head_keys and head_keys[0] in state else hp.get("num_classes")
        model = timm.create_model(arch, pretrained=False, num_classes=int(k_classes), in_chans=in_chans)
        model.load_state_dict(state)
    except (RuntimeError, KeyError, StopIteration, TypeError, ValueError) as e:
        raise ZooError(f"cannot rebuild {arch} from {path}: {' '.join(str(e).split())[:200]}") from None
    if model.num_classes != num_classes:
        raise ZooError(f"classifier {path} predicts {model.num_classes} classes but the GAN data has {num_classes}; "
                       f"use a classifier trained on the same dataset")
    known = hp.get("class_names")
    if class_names and known and list(known) != list(class_names):
        raise ZooError(f"classifier {path} knows classes {list(known)[:10]} but the GAN data has "
                       f"{list(class_names)[:10]}; use a classifier trained on the same dataset")
    if in_chans not in (channels, 3) or (in_chans == 1 and channels == 3):
        raise ZooError(f"classifier {path} takes {in_chans}-channel images but the GAN data has {channels}; "
                       f"use a classifier trained on the same dataset")
    mean = hp.get("mean") or data_cfg.get("mean") or [0.5] * in_chans
    std = hp.get("std") or data_cfg.get("std") or [0.5] * in_chans
    size = hp.get("image_size") or data_cfg.get("image_size")
    mean = list(mean) * (in_chans // len(mean)) if len(mean) != in_chans else list(mean)
    std = list(std) * (in_chans // len(std)) if len(std) != in_chans else list(std)
    return TimmClassifier(model.eval(), in_chans, int(size) if size else None, mean, std)


def cache_dir() -> Path:
    return Path(os.environ.get("ZOO_CACHE", Path.home() / ".cache" / "zoo")) / "gan"


def cache_path(key: str, num_classes: int, seed: int = 0, max_steps: int = 500) -> Path:
    """Where the built-in classifier for this train split and recipe is cached."""
    digest = hashlib.sha1(f"{RECIPE}|{key}|{num_classes}|{seed}|{max_steps}".encode()).hexdigest()[:16]
    return cache_dir() / f"classifier-{digest}.pt"


def train_small_cnn(train_set: Dataset, channels: int, num_classes: int, epochs: int = 20, max_steps: int = 500,
                    batch_size: int = 64, seed: int = 0) -> SmallCNN:
    """Fit SmallCNN on (image, label) pairs on the CPU; +-2 px random shifts so it judges slightly off-centre
    generated digits by shape, not position. One-cycle lr, then BatchNorm statistics re-estimated on the unshifted
    train split (a few hundred steps leave the running averages behind the final weights)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():  # keep the caller's RNG stream (the GAN's seed) untouched
        torch.manual_seed(seed)
        net = SmallCNN(channels, num_classes)
        loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, generator=gen)
        total = min(max_steps, epochs * len(loader))
        opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=total)
        step = 0
        net.train()
        for _ in range(epochs):
            for x, y in loader:
                dx, dy = torch.randint(-2, 3, (2,), generator=gen).tolist()
                x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
                loss = F.cross_entropy(net(x)[1], y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                if step >= total:
                    break
            if step >= total:
                break
        recalibrate_bn(net, DataLoader(train_set, batch_size=256), max_batches=max(1, 20_000 // 256))
    return net.eval()


@torch.no_grad()
def recalibrate_bn(net: nn.Module, loader: DataLoader, max_batches: int) -> None:
    """Replace BatchNorm running statistics by their plain average over (up to) max_batches batches."""
    for m in net.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average
    net.train()
    for i, (x, _) in enumerate(loader):
        if i >= max_batches:
            break
        net(x)
    for m in net.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.1


def builtin_evaluator(key: str, train_set: Dataset | None, channels: int, num_classes: int,
                      seed: int = 0, max_steps: int = 500) -> SmallCNN:
    """The cached SmallCNN for this train split (trained on first use), or random features for unlabelled data."""
    if not num_classes:
        log.info("unlabelled data and no task.module.eval_classifier: Fréchet distance in random CNN features")
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return SmallCNN(channels, 0).eval()
    path = cache_path(key, num_classes, seed, max_steps)
    net = SmallCNN(channels, num_classes)
    if path.is_file():
        try:
            net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            return net.eval()
        except Exception as e:  # noqa: BLE001 - torch's unpickler fails in many ways on a broken file (IndexError,
            # UnpicklingError, RuntimeError...); this is our cache, not user data, so any broken entry is rebuilt
            log.warning("cached evaluation classifier %s is unreadable (%s); training it again", path,
                        type(e).__name__)
    if train_set is None:
        raise ValueError("no cached evaluation classifier and no train split to fit one")
    log.info("training the evaluation classifier for %s (cached at %s)", key, path)
    net = train_small_cnn(train_set, channels, num_classes, seed=seed, max_steps=max_steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(net.state_dict(), tmp)
    os.replace(tmp, path)  # atomic: DDP ranks may race to write the same file
    return net


@torch.no_grad()
def accuracy(net: Evaluator, dataset: Dataset, batch_size: int = 256) -> float:
    correct = total = 0
    for x, y in DataLoader(dataset, batch_size=batch_size):
        correct += (net(x)[1].argmax(1) == y).sum().item()
        total += len(y)
    return correct / max(1, total)


# ---------------------------------------------------------------------------------------- what the GAN module holds
def to_rgb01(x: torch.Tensor) -> torch.Tensor:
    """[-1, 1] images (B, C, H, W) -> 3-channel [0, 1], what torchmetrics' FID takes with normalize=True."""
    x = ((x.float() + 1) / 2).clamp(0, 1)
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


def build_inception() -> Any:
    """torchmetrics' Inception FID, or one ZooError when torch-fidelity or its weights are missing."""
    from torchmetrics.utilities.imports import _TORCH_FIDELITY_AVAILABLE

    if not _TORCH_FIDELITY_AVAILABLE:
        raise ZooError("inception_fid=true needs the torch-fidelity package and its Inception-v3 weights "
                       "(downloaded on first use); install it where there is internet, or set "
                       "task.module.inception_fid=false (the classifier Fréchet distance still runs)")
    from torchmetrics.image.fid import FrechetInceptionDistance

    try:
        return FrechetInceptionDistance(feature=2048, normalize=True)
    except Exception as e:  # noqa: BLE001 - offline weight download fails in several ways
        raise ZooError(f"Inception weights for FID are not available ({type(e).__name__}); connect once to "
                       f"download them, or set task.module.inception_fid=false") from None


class Judge:
    """Everything a GAN is measured with: the evaluator network, Inception FID if asked, and per-stage metrics.

    A plain object, not an nn.Module: held by the LightningModule it stays out of its state_dict, DDP's parameter
    sync and checkpoints (a checkpoint does not depend on which evaluator judged it, and loads with
    weights_only=True). The metrics hold sums (torchmetrics states with dist_reduce_fx="sum"), so compute() gives
    the figure over every DDP rank's samples.

    Per stage: update_real() with each real batch, then score() with the generated samples, which also resets.
    """

    STAGES = ("val", "test")

    def __init__(self, evaluator: Evaluator, inception: Any = None) -> None:
        self.evaluator, self.inception = evaluator.requires_grad_(False).eval(), inception
        d, k = evaluator.num_features, max(1, evaluator.num_classes)
        self.metrics = {stage: {"fd": FrechetDistance(d), "floor": FrechetDistance(d), "counts": ClassCounts(k),
                                "cond": ClassCounts(2)} for stage in self.STAGES}

    def start(self, stage: str, device: torch.device) -> None:
        """At each evaluation epoch's start: everything onto the module's device, clean metrics."""
        self.evaluator.to(device)
        for metric in self.metrics[stage].values():
            metric.to(device).reset()
        if self.inception is not None:
            self.inception.to(device).reset()

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        with torch.autocast(x.device.type, enabled=False):  # FD needs float32 features
            return self.evaluator(x.float())

    def update_real(self, stage: str, x: torch.Tensor, reference: bool = True) -> None:
        """A real batch: the reference split (val) by default; reference=False is the train subset that test
        compares with the reference for the real-vs-real floor."""
        m, feats = self.metrics[stage], self.features(x)[0]
        if not reference:
            m["floor"].update(feats, real=False)
            return
        m["fd"].update(feats, real=True)
        if stage == "test":
            m["floor"].update(feats, real=True)
        if self.inception is not None:
            self.inception.update(to_rgb01(x), real=True)

    def real_count(self, stage: str) -> int:
        """Reference images this rank has seen in this stage."""
        return int(self.metrics[stage]["fd"].real_n)

    def score(self, stage: str, fakes: torch.Tensor, labels: torch.Tensor | None = None,
              batch_size: int = 256) -> dict[str, float]:
        """Judge generated images (N, C, H, W) in [-1, 1] (with the classes asked for, if conditional) against the
        real ones seen so far: fd, class coverage, cond_acc, fid, fd_floor (test). Resets the stage's metrics."""
        m = self.metrics[stage]
        for i in range(0, len(fakes), batch_size):
            feats, logits = self.features(fakes[i:i + batch_size])
            m["fd"].update(feats, real=False)
            if logits is not None:
                pred = logits.argmax(1)
                m["counts"].update(pred)
                if labels is not None:
                    m["cond"].update((pred == labels[i:i + batch_size]).long())
            if self.inception is not None:
                self.inception.update(to_rgb01(fakes[i:i + batch_size]), real=False)
        out = {"fd": float(m["fd"].compute())}
        if self.evaluator.num_classes:
            frac = m["counts"].compute()
            out.update(coverage_min=float(frac.min()), coverage_max=float(frac.max()),
                       classes_covered=float((frac >= 0.5 / len(frac)).sum()))
            if labels is not None:
                out["cond_acc"] = float(m["cond"].compute()[1])
        if self.inception is not None:
            out["fid"] = float(self.inception.compute())
        if stage == "test" and m["floor"].fake_n > 0:
            out["fd_floor"] = float(m["floor"].compute())
        for metric in m.values():
            metric.reset()
        return out


def build_judge(hp: Mapping[str, Any], datamodule: Any = None) -> Judge:
    """The judge for a DCGAN's hparams: its eval_classifier checkpoint, else the built-in classifier of the
    datamodule's train split (cached by the datamodule's cache_key()); Inception FID when inception_fid."""
    if hp["eval_classifier"]:
        ev = load_classifier_checkpoint(hp["eval_classifier"], hp["channels"], hp["num_classes"], hp["class_names"])
    else:
        key = datamodule.cache_key() if hasattr(datamodule, "cache_key") else \
            f"{type(datamodule).__name__}|{hp['image_size']}|{hp['channels']}"
        ev = builtin_evaluator(key, getattr(datamodule, "train_set", None), hp["channels"], hp["num_classes"],
                               max_steps=hp["eval_train_steps"])
    return Judge(ev, build_inception() if hp["inception_fid"] else None)
