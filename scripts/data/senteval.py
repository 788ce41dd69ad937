"""CR and SUBJ as SentEval distributes them (one sentence a line, one file per class) -> train.tsv and dev.tsv,
`label<TAB>sentence`, no header, the layout nlp_cr / nlp_subj read.

CR: custrev.pos (label 1) and custrev.neg (0). SUBJ: subj.objective (1) and subj.subjective (0), or the same two
files under the names of Pang & Lee's own archive (plot.tok.gt9.5000 = objective, quote.tok.gt9.5000 = subjective).
Each non-empty line becomes one example: whitespace runs (tabs included) collapsed to one space, lower-cased; the
positive file's lines first, then the other's, in file order; then shuffled with random.Random(seed) and cut:
the first floor(n * (1 - dev_fraction)) are train.tsv, the rest dev.tsv.
"""

from __future__ import annotations

import random
from argparse import Namespace
from pathlib import Path

from reading import Download, by_basename

from zoo.errors import ZooError

SENTEVAL = ("SentEval's data/downstream/get_transfer_data.bash (https://github.com/facebookresearch/SentEval), "
            "which fetches https://dl.fbaipublicfiles.com/senteval/senteval_data/datasmall_NB_ACL12.zip")
SETS: dict[str, dict] = {
    "cr": {"files": (("custrev.pos", "1"), ("custrev.neg", "0")), "folder": "CR", "where": SENTEVAL},
    "subj": {"files": (("subj.objective", "1"), ("subj.subjective", "0")), "folder": "SUBJ",
             "aliases": {"subj.objective": "plot.tok.gt9.5000", "subj.subjective": "quote.tok.gt9.5000"},
             "where": f"{SENTEVAL}, or rotten_imdb.tar.gz from https://www.cs.cornell.edu/people/pabo/movie-review-data/"},
}


def decode(data: bytes) -> str:
    """UTF-8, else Latin-1 (the encoding SentEval itself reads these files with)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def sentences(data: bytes) -> list[str]:
    return [s for s in (" ".join(line.split()).lower() for line in decode(data).splitlines()) if s]


def find(download: Download, spec: dict) -> dict[str, bytes]:
    """SentEval name -> the file's bytes, found anywhere in the download (its own name or its alias); where a
    name occurs twice, the copy in SentEval's CR/ or SUBJ/ folder is taken."""
    wanted = {name for name, _ in spec["files"]} | set(spec.get("aliases", {}).values())
    names, _ = download.scan(lambda name: False)
    where = by_basename(names, wanted.__contains__, prefer_parent=spec["folder"])  # SentEval's own CR/, SUBJ/
    chosen = {}
    for name, _ in spec["files"]:
        alias = spec.get("aliases", {}).get(name)
        path = where.get(name) or (where.get(alias) if alias else None)
        if path is None:
            also = f" (or {alias})" if alias else ""
            raise ZooError(f"{download.path} holds no {name}{also}; get it from {spec['where']}")
        chosen[name] = path
    data = download.read(set(chosen.values()))
    return {name: data[path] for name, path in chosen.items()}


def build(args: Namespace, download: Path, out: Path) -> str:
    spec = SETS[args.dataset]
    if not 0 < args.dev_fraction < 1:
        raise ZooError(f"--dev-fraction {args.dev_fraction} is not between 0 and 1; e.g. 0.2")
    files = find(Download(download, spec["where"]), spec)
    rows = []
    for name, label in spec["files"]:
        lines = sentences(files[name])
        if not lines:
            raise ZooError(f"{name} in {download} holds no sentences; get it again from {spec['where']}")
        rows += [(label, s) for s in lines]
    random.Random(args.seed).shuffle(rows)
    n_train = int(len(rows) * (1 - args.dev_fraction))
    out.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", rows[:n_train]), ("dev", rows[n_train:])):
        (out / f"{split}.tsv").write_text("".join(f"{label}\t{text}\n" for label, text in part), encoding="utf-8")
    return (f"{args.dataset}: {n_train} train / {len(rows) - n_train} dev sentences (seed {args.seed}, "
            f"dev fraction {args.dev_fraction})")
