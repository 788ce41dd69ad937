"""Image data for the GAN task: every sample is (image (C, H, W) float in [-1, 1], label int; -1 when unlabelled).

- digits: scikit-learn's 1,797 handwritten digits (8x8, shipped with the package: the offline default), upsampled.
- mnist, fashion_mnist, cifar10, celeba: torchvision datasets, downloaded into `data_dir` on first use.
- folder: a user's images under `root`; one sub-folder per class makes the data labelled (conditional models).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from zoo.errors import ZooError
from zoo.kit.images import IMAGE_EXTENSIONS, WIDE_GREY, check_images, is_image_file, open_image
from zoo.kit.loaders import auto_workers, loader_options

log = logging.getLogger(__name__)

# name -> (native channels, class names; empty = unlabelled)
DATASETS: dict[str, tuple[int, list[str]]] = {
    "digits": (1, [str(i) for i in range(10)]),
    "mnist": (1, [str(i) for i in range(10)]),
    "fashion_mnist": (1, ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                          "boot"]),
    "cifar10": (3, ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]),
    "celeba": (3, []),
    "folder": (3, []),
}
GRAY_MODES = {"1", "L", "LA", *WIDE_GREY}
IN_MEMORY = {"digits"}  # held as one tensor: a worker process would only add a hop per batch


def resolve_workers(value: int | str, in_memory: bool) -> int:
    """`auto`: 0 for in-memory data; else one loader process per usable core but the trainer's own (decoding and
    resizing images is the per-batch CPU cost, and it must keep up with a GPU step of a few milliseconds)."""
    if value != "auto":
        if not str(value).isdigit():
            raise ZooError(f"task.data.num_workers={value!r}; use auto or a number of loader processes")
        return int(value)
    return 0 if in_memory else auto_workers("auto")


def load_digits_tensor(image_size: int, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn digits as (1797, C, S, S) in [-1, 1] and labels (1797,); 8x8 grey levels 0..16, bilinear up."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0  # (N, 1, 8, 8) in [0, 1]
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False).clamp(0, 1)
    return (x * 2 - 1).expand(-1, channels, -1, -1).contiguous(), torch.tensor(d.target, dtype=torch.long)


def scan_folder(root: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """Image files under root and class names: one sub-folder per class, or a flat folder (unlabelled, label -1)."""
    if not root.is_dir():
        raise ZooError(f"image folder {root} does not exist; set task.data.root to a folder of images")
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if subdirs and any(is_image_file(f) for d in subdirs for f in d.rglob("*")):
        classes = [d.name for d in subdirs]
        files = [(f, i) for i, d in enumerate(subdirs) for f in sorted(d.rglob("*")) if is_image_file(f)]
    else:
        classes, files = [], [(f, -1) for f in sorted(root.rglob("*")) if is_image_file(f)]
    if not files:
        raise ZooError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {root}; point task.data.root at them")
    return files, classes


class ImageFiles(Dataset):
    """Images from a file list, converted to `channels` (L or RGB), resized (shorter side) and centre-cropped."""

    def __init__(self, files: list[tuple[Path, int]], channels: int, image_size: int) -> None:
        from torchvision import transforms as T

        self.files, self.mode = files, "L" if channels == 1 else "RGB"
        self.tf = T.Compose([T.Resize(image_size), T.CenterCrop(image_size), T.ToTensor(),
                             T.Normalize([0.5] * channels, [0.5] * channels)])

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.files[i]
        return self.tf(open_image(path, self.mode)), label


class _Relabel(Dataset):
    """torchvision dataset -> (image, int label), label -1 for unlabelled sets (CelebA without attributes)."""

    def __init__(self, ds: Dataset, labelled: bool) -> None:
        self.ds, self.labelled = ds, labelled

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.ds[i]
        return x, int(y) if self.labelled else -1


class GANDataModule(L.LightningDataModule):
    """Train split for the GAN, val split as the real reference for the Fréchet distance.

    test: two loaders, the val split (reference) and an equal-sized subset of the train split, so the test stage
    can report the real-vs-real floor at the same sample count as the generated figure.
    """

    def __init__(self, name: str = "digits", image_size: int = 32, channels: int | None = None, batch_size: int = 64,
                 num_workers: int | str = "auto", val_fraction: float = 0.2, val_size: int | None = None,
                 data_dir: str = "data", root: str | None = None, download: bool = True, seed: int = 0) -> None:
        super().__init__()
        if name not in DATASETS:
            raise ZooError(f"unknown GAN dataset {name!r}; use one of {', '.join(DATASETS)}")
        if image_size not in (32, 64):
            raise ZooError(f"image_size {image_size} is not supported by DCGAN here; use 32 or 64")
        if name == "folder" and not root:
            raise ZooError("data name=folder needs task.data.root=<folder of images>")
        if not 0 < val_fraction < 1:
            raise ZooError(f"val_fraction {val_fraction} must be in (0, 1)")
        self.name, self.image_size, self.batch_size = name, image_size, batch_size
        self.num_workers = resolve_workers(num_workers, name in IN_MEMORY)
        self.val_fraction, self.val_size, self.seed, self.download = val_fraction, val_size, seed, download
        self.data_dir, self.root = Path(data_dir).expanduser(), Path(root).expanduser() if root else None
        native, self.class_names = DATASETS[name]
        self._files: list[tuple[Path, int]] | None = None
        if name == "folder":
            self._files, self.class_names = scan_folder(self.root)
            # every file, up front: one error naming all unreadable images instead of a crash mid-epoch
            check_images([f for f, _ in self._files], str(self.root))
            native = self._check_folder_images() if channels is None else channels
        self.channels = int(channels or native)
        if self.channels not in (1, 3):
            raise ZooError(f"channels={self.channels}: use 1 (grey) or 3 (RGB)")
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None

    # -- metadata the module receives as __init__ arguments (contract: model_kwargs) --
    def model_kwargs(self) -> dict[str, Any]:
        return {"channels": self.channels, "image_size": self.image_size, "num_classes": len(self.class_names),
                "class_names": list(self.class_names)}

    def cache_key(self) -> str:
        """Identifies the train split, for the cached evaluation classifier."""
        src = str(self.root.resolve()) if self.root else self.name
        return f"{src}|{self.image_size}|{self.channels}|{self.val_fraction}|{self.seed}"

    def _check_folder_images(self) -> int:
        """Say when a folder mixes sizes or modes (everything is converted and resized); pick 1 or 3 channels."""
        from PIL import Image

        sizes, modes = Counter(), Counter()
        for path, _ in self._files:  # all readable: checked by check_images
            with Image.open(path) as im:
                sizes[im.size] += 1
                modes[im.mode] += 1
        channels = 1 if set(modes) <= GRAY_MODES else 3
        target = f"{'L' if channels == 1 else 'RGB'} {self.image_size}x{self.image_size}"
        if len(sizes) > 1 or len(modes) > 1 or set(sizes) != {(self.image_size, self.image_size)}:
            seen = lambda c: ", ".join(  # noqa: E731
                f"{k if isinstance(k, str) else f'{k[0]}x{k[1]}'} ({n})" for k, n in c.most_common(4))
            log.warning("image folder %s: %d images with sizes %s and modes %s; converting all to %s "
                        "(resize shorter side + centre crop)", self.root, len(self._files), seen(sizes), seen(modes),
                        target)
        return channels

    # -- torchvision datasets --
    def _torchvision(self, train: bool, download: bool) -> Dataset:
        from torchvision import datasets as tvd
        from torchvision import transforms as T

        c = self.channels
        tf = [T.Resize(self.image_size), T.CenterCrop(self.image_size)]
        if c != DATASETS[self.name][0]:
            tf.append(T.Grayscale(c))
        tf = T.Compose(tf + [T.ToTensor(), T.Normalize([0.5] * c, [0.5] * c)])
        root = str(self.data_dir)
        try:
            if self.name == "celeba":
                ds = tvd.CelebA(root, split="train" if train else "valid", target_type=[], transform=tf,
                                download=download)
            else:
                cls = {"mnist": tvd.MNIST, "fashion_mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10}[self.name]
                ds = cls(root, train=train, transform=tf, download=download)
        except Exception as e:  # noqa: BLE001 - network/file errors of every kind end the same way for the user
            why = " ".join(str(e).split())[:160]
            raise ZooError(f"cannot load {self.name} from {root} ({type(e).__name__}: {why}); without internet put "
                           f"the dataset files there yourself, or use task.data.name=digits (offline)") from None
        return _Relabel(ds, labelled=bool(self.class_names))

    def prepare_data(self) -> None:
        if self.name not in ("digits", "folder"):
            self._torchvision(True, self.download)
            self._torchvision(False, self.download)

    def _split(self, n: int) -> tuple[list[int], list[int]]:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        n_val = max(2, int(round(self.val_fraction * n)))
        return perm[n_val:], perm[:n_val]

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if self.name == "digits":
            x, y = load_digits_tensor(self.image_size, self.channels)
            full = TensorDataset(x, y)
            tr, va = self._split(len(full))
            self.train_set, self.val_set = Subset(full, tr), Subset(full, va)
        elif self.name == "folder":
            full = ImageFiles(self._files, self.channels, self.image_size)
            tr, va = self._split(len(full))
            self.train_set, self.val_set = Subset(full, tr), Subset(full, va)
        else:
            self.train_set, self.val_set = self._torchvision(True, False), self._torchvision(False, False)
        if self.val_size and self.val_size < len(self.val_set):
            keep = torch.randperm(len(self.val_set), generator=torch.Generator().manual_seed(self.seed + 1))
            self.val_set = Subset(self.val_set, keep[: self.val_size].tolist())

    def _loader(self, ds: Dataset, shuffle: bool, drop_last: bool = False) -> DataLoader:
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, drop_last=drop_last,
                          **loader_options(self.trainer, self.num_workers))

    def train_dataloader(self) -> DataLoader:
        # drop_last: a last batch of 1-2 images makes BatchNorm statistics (and D's verdict) noisy
        return self._loader(self.train_set, shuffle=True, drop_last=len(self.train_set) > self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        n = min(len(self.val_set), len(self.train_set))
        pick = torch.randperm(len(self.train_set), generator=torch.Generator().manual_seed(self.seed + 2))[:n]
        return [self._loader(self.val_set, shuffle=False), self._loader(Subset(self.train_set, pick.tolist()), False)]
