"""Build the data folders the recommended presets read, from each publisher's own download (docs/data.md).

    python scripts/data/build.py flowers12 ~/Downloads/17flowers.tgz data/flowers12   # datasplits.mat beside it
    python scripts/data/build.py cr SentEval/data/downstream data/cr                  # custrev.pos / custrev.neg
    python scripts/data/build.py subj SentEval/data/downstream data/subj              # subj.objective / .subjective
    python scripts/data/build.py fsdd free-spoken-digit-dataset-master.zip data/fsdd
    python scripts/data/build.py so762 speechocean762.tar.gz data/so762

It never downloads: `python scripts/data/build.py <dataset> --help` says where the publisher offers the files. The
download may be the archive as published or the folder it unpacks to. The out folder must be new or empty; the
result is written into a temp folder beside it and renamed into place at the end, so an error, Ctrl-C or SIGTERM
leaves no half-built folder. Bad input (a wrong or truncated archive, a missing file) is one line `zoo: error: ...`
and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the builders beside this file, however it is started

from zoo.errors import ZooError, one_line  # noqa: E402

DATASETS = {
    "flowers12": ("12 Oxford flower species, train/ val/ ImageFolder (vision_flowers12)",
                  "the 17 Category Flower Dataset: 17flowers.tgz and datasplits.mat from "
                  "https://www.robots.ox.ac.uk/~vgg/data/flowers/17/"),
    "cr": ("Customer Reviews polarity, train.tsv / dev.tsv (nlp_cr, nlp_cr_base)",
           "custrev.pos and custrev.neg as SentEval distributes them: its data/downstream/get_transfer_data.bash "
           "(https://github.com/facebookresearch/SentEval)"),
    "subj": ("Subjectivity, train.tsv / dev.tsv (nlp_subj, nlp_subj_base)",
             "subj.objective and subj.subjective as SentEval distributes them (its get_transfer_data.bash), or "
             "rotten_imdb.tar.gz from https://www.cs.cornell.edu/people/pabo/movie-review-data/"),
    "fsdd": ("Free Spoken Digit Dataset recordings (speech_fsdd)",
             "the repository https://github.com/Jakobovski/free-spoken-digit-dataset (a clone, or its ZIP)"),
    "so762": ("speechocean762: FLAC, TSV, JSON-lines manifest, speakers.tsv (speech manifests)",
              "speechocean762.tar.gz from https://www.openslr.org/101/ (or a clone of "
              "https://github.com/jimbozhang/speechocean762)"),
}


# What the builders import beyond the core install: scipy reads datasplits.mat, soundfile the audio (both come with
# the zoo's [speech] extra); a missing one is one line naming the pip command, not a traceback.
PACKAGES = {"scipy": "scipy", "soundfile": "soundfile", "PIL": "pillow"}


class Stopped(Exception):
    """SIGTERM, raised where the build is, so that its temp folder is removed on the way out."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/data/build.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="dataset", required=True, metavar="dataset")
    for name, (what, where) in DATASETS.items():
        d = sub.add_parser(name, help=what, description=f"{what}. Download: {where}.")
        d.add_argument("download", help="the publisher's archive as downloaded, or the folder it unpacks to")
        d.add_argument("out", help="the folder to build (new or empty)")
        if name == "flowers12":
            d.add_argument("--datasplits", help="datasplits.mat (default: beside the archive)")
            d.add_argument("--split", type=int, choices=(1, 2, 3), default=1, help="which of the dataset's three "
                           "splits: its tst images are val/, its trn + val images train/ (default 1)")
            d.add_argument("--size", type=int, default=224, help="square side in pixels; 0 copies the published "
                           "JPEGs unchanged (default 224)")
        elif name in ("cr", "subj"):
            d.add_argument("--seed", type=int, default=0, help="the shuffle before the train/dev cut (default 0)")
            d.add_argument("--dev-fraction", type=float, default=0.2, help="share of sentences in dev.tsv (0.2)")
        elif name == "fsdd":
            d.add_argument("--speakers", default="george,jackson,lucas,nicolas",
                           help="comma-separated speakers to keep, or all (default: the four the results used)")
        else:
            d.add_argument("--splits", default="train", help="train, test or train,test (default train)")
    return p


def builder(dataset: str) -> Callable[[argparse.Namespace, Path, Path], str]:
    if dataset == "flowers12":
        import flowers12

        return flowers12.build
    if dataset in ("cr", "subj"):
        import senteval

        return senteval.build
    import spoken

    return spoken.build_fsdd if dataset == "fsdd" else spoken.build_so762


def check_out(out: Path) -> Path:
    """The out folder: absent or an empty folder (nothing of the user's is ever replaced)."""
    out = Path(os.path.abspath(out.expanduser()))
    if out.exists() and not out.is_dir():
        raise ZooError(f"{out} is a file; give a new or empty folder")
    if out.exists() and any(out.iterdir()):
        raise ZooError(f"{out} already holds files; give a new or empty folder")
    return out


def build_into(out: Path, build: Callable[[Path], str]) -> str:
    """Run `build` into a temp folder beside `out`, then one rename; on any failure the temp folder goes."""
    from zoo.core import owned

    tmp = owned.temp_dir(out.parent, prefix=f".{out.name}.", suffix=".building")
    try:
        summary = build(tmp)
        check_out(out)  # a folder that filled meanwhile is not replaced
        os.rename(tmp, out)
        return summary
    except BaseException:
        owned.remove(tmp)
        raise


def _stop(signum: int, frame: object) -> None:
    raise Stopped


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        out = check_out(out)
        build = builder(args.dataset)
        summary = build_into(out, lambda tmp: build(args, Path(args.download), tmp))
    except ModuleNotFoundError as e:
        package = PACKAGES.get((e.name or "").split(".")[0])
        if package is None:
            raise
        print(f"zoo: error: building {args.dataset} needs the Python package {package}; pip install {package}",
              file=sys.stderr, flush=True)
        return 2
    except ZooError as e:
        print(f"zoo: error: {one_line(e)}", file=sys.stderr, flush=True)
        return 2
    except (KeyboardInterrupt, Stopped) as e:
        print(f"zoo: stopped; nothing was written to {out}", file=sys.stderr, flush=True)
        return 130 if isinstance(e, KeyboardInterrupt) else 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"{summary}; built {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
