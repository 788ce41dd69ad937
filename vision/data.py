"""Image classification data: scikit-learn's digits (offline default), CIFAR-10/100 (torchvision download) and
ImageFolder (a user's train/ val/ [test/] folders). One DataModule, picked by `dataset=`.

Normalisation and input size follow the weights `pretrained` picks for the backbone (`norm_config`: timm's config for
hub weights, the package's for packaged weights, the checkpoint's for a zoo .ckpt), so weights see the inputs they
were trained on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torchvision.transforms import v2

from zoo.core.resume import resumed_checkpoint
from zoo.errors import ZooError
from zoo.kit.images import IMAGE_EXTENSIONS, check_images, is_image_file, open_image
from zoo.kit.loaders import auto_workers, loader_options

log = logging.getLogger(__name__)

DATASETS = ("digits", "cifar10", "cifar100", "imagefolder")
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def channel_stats(stats: list[float], channels: int) -> list[float]:
    """ImageNet's RGB mean/std for a grey input: their average (timm averages conv1 the same way)."""
    return [sum(stats) / len(stats)] if channels == 1 else list(stats)[:channels]


def eval_transform(size: int, mean: list[float], std: list[float], resize: bool = True) -> Any:
    """Evaluation preprocessing: resize + centre crop to `size` (unless already at size), then normalise."""
    steps = [v2.Resize(size, antialias=True), v2.CenterCrop(size)] if resize else []
    return v2.Compose([v2.ToImage(), *steps, v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])


class TransformDataset(Dataset):
    """Applies a transform to (image, label) pairs of another dataset."""

    def __init__(self, base: Dataset, transform: Any, with_index: bool = False) -> None:
        self.base, self.transform, self.with_index = base, transform, with_index

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple:
        x, y = self.base[i]
        return (self.transform(x), int(y), i) if self.with_index else (self.transform(x), int(y))


class ImageDataModule(pl.LightningDataModule):
    def __init__(self, dataset: str = "digits", root: str = "~/.cache/zoo/data", arch: str = "resnet18",
                 image_size: int | None = None, channels: int | None = None, batch_size: int = 64,
                 num_workers: int | str = "auto", augment: bool = True, download: bool = True,
                 val_fraction: float = 0.15, test_fraction: float = 0.2, seed: int = 42,
                 check_images: bool = True, pretrained: bool | str = "auto", cache_features: bool = False,
                 cache_augmented: bool = False) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ZooError(f"unknown dataset '{dataset}': use one of {', '.join(DATASETS)}")
        from zoo.vision.models import norm_config

        self.dataset, self.root = dataset, Path(root).expanduser()
        self.batch_size, self.augment, self.download, self.seed = batch_size, augment, download, seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.check_images = check_images
        # the module caches a frozen backbone's features by sample index: batches carry it, inputs stay fixed
        self.with_index = bool(cache_features)
        # cache_augmented: each epoch's augmented view is cached apart (the module's head_fit=lbfgs), and no photo
        # is dropped from an epoch, so every photo has as many views as epochs
        self.cache_augmented = self.with_index and bool(cache_augmented)
        if self.with_index and augment and not self.cache_augmented:
            log.info("cache_features: training images are not augmented (cached features stand for fixed inputs)")
            self.augment = False
        self.channels = channels or (1 if dataset == "digits" else 3)
        # the inputs the chosen weights were trained on; a resume goes on with those its run began on (which a
        # pretrained file moved since could no longer tell)
        saved = (resumed_checkpoint() or {}).get("hyper_parameters") or {}
        if saved.get("mean") and saved.get("std") and saved.get("image_size"):
            norm = {"mean": saved["mean"], "std": saved["std"], "input_size": saved["image_size"]}
        else:
            norm = norm_config(arch, pretrained)
        self.image_size = int(image_size or norm["input_size"])
        self.mean, self.std = channel_stats(norm["mean"], self.channels), channel_stats(norm["std"], self.channels)
        self.num_workers = 0 if dataset == "digits" else auto_workers(num_workers)  # in-memory: workers only cost
        self.class_names = self._class_names()
        self.train_set = self.val_set = self.test_set = None
        self.test_is_val = False  # imagefolder without test/: the module says so when it tests
        if dataset == "imagefolder":
            self._setup_folder()  # scan now: a missing or empty folder fails before any model is built

    # ------------------------------------------------------------------ what the model needs to know
    def model_kwargs(self) -> dict:
        return {"num_classes": len(self.class_names), "class_names": self.class_names, "in_chans": self.channels,
                "image_size": self.image_size, "mean": self.mean, "std": self.std}

    def check_model(self, model: Any) -> None:
        known = list(model.hparams.get("class_names") or [])
        if known != self.class_names:
            raise ZooError(f"the checkpoint's classes ({_short(known)}) differ from the data's "
                           f"({_short(self.class_names)}); use data with the same classes, or fine-tune a new run "
                           "from the checkpoint (task.module.pretrained=<ckpt>) to learn these")

    def _class_names(self) -> list[str]:
        if self.dataset == "digits":
            return [str(i) for i in range(10)]
        if self.dataset == "cifar10":
            return CIFAR10_CLASSES
        if self.dataset == "cifar100":
            return _cifar100_classes()
        return _folder_classes(self.root / "train", self.root)

    # ------------------------------------------------------------------ transforms
    def _normalize(self) -> list:
        return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)]

    def train_transform(self) -> Any:
        s = self.image_size
        if not self.augment:
            return self.eval_transform()
        if self.dataset == "digits":  # digits have no left/right symmetry: shifts and small rotations only
            aug = [v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))]
        elif s <= 64:  # CIFAR-style small images: pad-and-crop + flip
            aug = [v2.Resize(s), v2.RandomCrop(s, padding=s // 8, padding_mode="reflect"), v2.RandomHorizontalFlip()]
        else:
            aug = [v2.RandomResizedCrop(s, scale=(0.35, 1.0), antialias=True), v2.RandomHorizontalFlip()]
        return v2.Compose([v2.ToImage(), *aug, *self._normalize()])

    def eval_transform(self) -> Any:
        # digits are upsampled to image_size once, in setup
        return eval_transform(self.image_size, self.mean, self.std, resize=self.dataset != "digits")

    # ------------------------------------------------------------------ datasets
    def prepare_data(self) -> None:
        if self.dataset.startswith("cifar"):
            _cifar(self.dataset, self.root, train=True, download=self.download)
            _cifar(self.dataset, self.root, train=False, download=self.download)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if self.dataset == "digits":
            self._setup_digits()
        elif self.dataset.startswith("cifar"):
            train = _cifar(self.dataset, self.root, train=True, download=False)
            test = _cifar(self.dataset, self.root, train=False, download=False)
            n_val = int(len(train) * self.val_fraction)
            gen = torch.Generator().manual_seed(self.seed)
            val_idx, train_idx = torch.randperm(len(train), generator=gen).split([n_val, len(train) - n_val])
            self.train_set = self._wrap(torch.utils.data.Subset(train, train_idx.tolist()), self.train_transform())
            self.val_set = self._wrap(torch.utils.data.Subset(train, val_idx.tolist()), self.eval_transform())
            self.test_set = self._wrap(test, self.eval_transform())
        else:
            self._setup_folder()

    def _setup_digits(self) -> None:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()  # 1,797 real 8x8 handwritten digits shipped with scikit-learn
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
        x = torch.nn.functional.interpolate(x, size=self.image_size, mode="bilinear", align_corners=False)
        x = x.expand(-1, self.channels, -1, -1).contiguous()
        y = torch.tensor(digits.target)
        idx = torch.arange(len(y)).numpy()
        rest, test = train_test_split(idx, test_size=self.test_fraction, stratify=y, random_state=self.seed)
        val_size = self.val_fraction / (1 - self.test_fraction)
        train, val = train_test_split(rest, test_size=val_size, stratify=y[rest], random_state=self.seed)
        ds = TensorDataset(x, y)
        self.train_set = self._wrap(torch.utils.data.Subset(ds, train.tolist()), self.train_transform())
        self.val_set = self._wrap(torch.utils.data.Subset(ds, val.tolist()), self.eval_transform())
        self.test_set = self._wrap(torch.utils.data.Subset(ds, test.tolist()), self.eval_transform())

    def _setup_folder(self) -> None:
        mode = "L" if self.channels == 1 else "RGB"
        train = CheckedImageFolder(self.root / "train", self.class_names, mode)
        val_dir = self.root / "val"
        if not val_dir.is_dir():
            raise ZooError(f"{self.root} has train/ but no val/ folder; ImageFolder data needs "
                           "<root>/train/<class>/*.jpg and <root>/val/<class>/*.jpg")
        val = CheckedImageFolder(val_dir, self.class_names, mode)
        test_dir = self.root / "test"
        self.test_is_val = not test_dir.is_dir()
        test = val if self.test_is_val else CheckedImageFolder(test_dir, self.class_names, mode)
        if self.check_images:  # every unreadable file named now, not the first one mid-epoch
            check_images(dict.fromkeys(p for ds in (train, val, test) for p, _ in ds.samples), str(self.root))
        self.train_set = self._wrap(train, self.train_transform())
        self.val_set = self._wrap(val, self.eval_transform())
        self.test_set = self._wrap(test, self.eval_transform())

    def _wrap(self, base: Dataset, transform: Any) -> TransformDataset:
        return TransformDataset(base, transform, with_index=self.with_index)

    # ------------------------------------------------------------------ loaders
    def _loader(self, ds: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle,
                          drop_last=shuffle and len(ds) > self.batch_size and not self.cache_augmented,
                          **loader_options(self.trainer, self.num_workers))

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)


def _short(names: list) -> str:
    s = ", ".join(map(str, names))
    return s if len(s) < 60 else s[:57] + "..."


def _cifar(name: str, root: Path, train: bool, download: bool) -> Dataset:
    from torchvision.datasets import CIFAR10, CIFAR100

    cls = CIFAR10 if name == "cifar10" else CIFAR100
    try:
        return cls(str(root), train=train, download=download)
    except Exception as e:  # noqa: BLE001 - URLError, RuntimeError("Dataset not found"), ...
        raise ZooError(f"{name} is not in {root} and could not be downloaded ({type(e).__name__}); download it on a "
                       f"connected machine into {root}, or use task.data.dataset=imagefolder") from None


def _cifar100_classes() -> list[str]:
    # Alphabetical CIFAR-100 fine labels, as torchvision orders them.
    return ("apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel "
            "can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur "
            "dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion "
            "lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree "
            "pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea "
            "seal shark shrew skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table "
            "tank telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf "
            "woman worm").split()


def _folder_classes(train_dir: Path, root: Path) -> list[str]:
    if not root.is_dir():
        raise ZooError(f"image folder not found: {root}; set task.data.root to a folder with train/ and val/ "
                       "(presets on the shared photos read $ZOO_SHARED_DATA/images/..., default ../shared/data)")
    if not train_dir.is_dir():
        raise ZooError(f"{root} has no train/ folder; ImageFolder data needs <root>/train/<class>/*.jpg "
                       "and <root>/val/<class>/*.jpg")
    classes = sorted(d.name for d in train_dir.iterdir() if d.is_dir())
    empty = [c for c in classes if not any(is_image_file(p) for p in (train_dir / c).rglob("*"))]
    if empty and len(empty) < len(classes):  # a class the model would predict without ever seeing one example
        # (no image in any class: the folder's own "no images" line says that)
        raise ZooError(f"{train_dir} has class folder(s) without images: {_short(empty)}; add images or remove the "
                       "empty folder(s)")
    if len(classes) < 2:
        raise ZooError(f"{train_dir} has {len(classes)} class sub-folder(s), a classifier needs at least 2; "
                       f"put images in {train_dir}/<class_name>/")
    return classes


class CheckedImageFolder(Dataset):
    """ImageFolder that names the problem: empty folders, unknown classes, unreadable files."""

    def __init__(self, folder: Path, class_names: list[str], mode: str) -> None:
        self.mode = mode
        index = {c: i for i, c in enumerate(class_names)}
        extra = sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name not in index)
        if extra:
            raise ZooError(f"{folder} has classes missing from train/: {_short(extra)}; every class needs "
                           "training images")
        self.samples = [(p, index[c]) for c in class_names if (folder / c).is_dir()
                        for p in sorted((folder / c).rglob("*")) if is_image_file(p)]
        if not self.samples:
            raise ZooError(f"no images ({', '.join(IMAGE_EXTENSIONS[:4])}, ...) under {folder}/<class>/; "
                           "check task.data.root")

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, label = self.samples[i]
        return load_image(path, self.mode), label


def load_image(path: Path, mode: str = "RGB") -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return open_image(path, mode)
    except Image.DecompressionBombError:  # PIL's bound on pixels, checked from the header before any decoding
        raise ZooError(f"image {path} is too large to decode (over {2 * Image.MAX_IMAGE_PIXELS:,} pixels, PIL's "
                       "bound against decompression bombs); resize it") from None
    except (UnidentifiedImageError, OSError) as e:
        raise ZooError(f"cannot read image {path} ({type(e).__name__}); remove or replace the file") from None
