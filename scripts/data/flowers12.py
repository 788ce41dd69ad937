"""flowers12 from the Oxford 17 Category Flower Dataset: `17flowers.tgz` (jpg/image_0001.jpg .. image_1360.jpg) and
`datasplits.mat` (trn1..3, val1..3, tst1..3: 1-based image numbers).

The 17 species come in blocks of 80 images in this order (image i is species (i - 1) // 80); flowers12 keeps 12 of
them. For each kept species, split k's tst images go to val/ (20 per species) and its trn + val images to train/
(40 + 20 = 60), so val/ is the dataset's own test split. Each photo is scaled so that its shorter side is `size`
pixels and centre-cropped to a square (what the zoo's evaluation transform does too), then saved as an RGB JPEG at
Pillow's default quality (75); size 0 copies the published files unchanged.
"""

from __future__ import annotations

import io
import re
from argparse import Namespace
from pathlib import Path

from reading import Download

from zoo.errors import ZooError

WHERE = "https://www.robots.ox.ac.uk/~vgg/data/flowers/17/ (17flowers.tgz and datasplits.mat)"
SPECIES_17 = ("daffodil", "snowdrop", "lily-valley", "bluebell", "crocus", "iris", "tigerlily", "tulip", "fritillary",
              "sunflower", "daisy", "colts-foot", "dandelion", "cowslip", "buttercup", "windflower", "pansy")
KEPT = ("bluebell", "buttercup", "colts-foot", "daisy", "dandelion", "fritillary", "iris", "lily-valley", "pansy",
        "sunflower", "tigerlily", "windflower")
PER_SPECIES = 80
IMAGE = re.compile(r"image_(\d{4})\.jpg")


def species_of(number: int) -> str:
    return SPECIES_17[(number - 1) // PER_SPECIES]


def locate(download: Path, datasplits: str | None) -> tuple[Path, Path]:
    """(the archive or its unpacked folder, datasplits.mat): a folder holding 17flowers.tgz (or jpg/) and the .mat,
    or the .tgz with the .mat beside it, unless --datasplits names it."""
    download = download.expanduser()
    images = download
    if download.is_dir() and (download / "17flowers.tgz").is_file():
        images = download / "17flowers.tgz"
    mat = Path(datasplits).expanduser() if datasplits else (download if download.is_dir() else download.parent)
    if mat.is_dir():
        mat = mat / "datasplits.mat"
    mat = mat.absolute()
    if not mat.is_file():
        raise ZooError(f"{mat} not found; download datasplits.mat from {WHERE} and put it beside 17flowers.tgz "
                       "(or pass --datasplits <file>)")
    return images, mat


def read_split(mat: Path, split: int) -> tuple[set[int], set[int]]:
    """(train numbers, val numbers) of split `split`: trn + val, and tst."""
    from scipy.io import loadmat

    try:
        table = loadmat(str(mat))
    except Exception as e:  # noqa: BLE001 - a cut or foreign .mat raises ValueError, TypeError, OSError, ...
        raise ZooError(f"{mat} is not a readable MATLAB file ({type(e).__name__}); download datasplits.mat again "
                       f"from {WHERE}") from None
    keys = [f"trn{split}", f"val{split}", f"tst{split}"]
    missing = [k for k in keys if k not in table]
    if missing:
        raise ZooError(f"{mat} has no {', '.join(missing)}; is it the 17 Flowers datasplits.mat? ({WHERE})")
    trn, val, tst = ({int(x) for x in table[k].ravel()} for k in keys)
    bad = sorted(n for n in trn | val | tst if not 1 <= n <= len(SPECIES_17) * PER_SPECIES)
    if bad:
        raise ZooError(f"{mat}: image number {bad[0]} is outside 1-{len(SPECIES_17) * PER_SPECIES}; is it the 17 "
                       f"Flowers datasplits.mat? ({WHERE})")
    return trn | val, tst


def square_jpeg(data: bytes, size: int, name: str) -> bytes:
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError) as e:
        raise ZooError(f"{name} is not a readable JPEG ({' '.join(str(e).split())[:80]}); download 17flowers.tgz "
                       f"again from {WHERE}") from None
    if size == 0:
        return data
    image = ImageOps.fit(image.convert("RGB"), (size, size), method=Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    return buf.getvalue()


def build(args: Namespace, download: Path, out: Path) -> str:
    images, mat = locate(download, args.datasplits)
    train, val = read_split(mat, args.split)
    wanted = {n for n in train | val if species_of(n) in KEPT}
    source = Download(images, WHERE)
    names, found = source.scan(lambda name: _number(name) in wanted)
    by_number = {_number(name): data for name, data in found.items()}
    absent = sorted(wanted - set(by_number))
    if absent:
        raise ZooError(f"{images} lacks {len(absent)} of the {len(wanted)} photos the split names (e.g. "
                       f"image_{absent[0]:04d}.jpg); is it 17flowers.tgz? ({WHERE})")
    counts: dict[tuple[str, str], int] = {}
    for number in sorted(wanted):
        part = "val" if number in val else "train"
        folder = out / part / species_of(number)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"image_{number:04d}.jpg"
        (folder / name).write_bytes(square_jpeg(by_number[number], args.size, name))
        counts[part, species_of(number)] = counts.get((part, species_of(number)), 0) + 1
    empty = [f"{part}/{s}" for s in KEPT for part in ("train", "val") if not counts.get((part, s))]
    if empty:
        raise ZooError(f"split {args.split} of {mat} leaves {', '.join(empty)} empty; use the 17 Flowers "
                       f"datasplits.mat ({WHERE})")
    n_train = sum(v for (p, _), v in counts.items() if p == "train")
    return f"flowers12: {len(KEPT)} species, {n_train} train / {len(wanted) - n_train} val photos (split {args.split})"


def _number(name: str) -> int | None:
    m = IMAGE.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None
