"""The drills of numbers that are not numbers, of inputs that are not what they look like, and of tracebacks where one
line is due (harness.py holds the properties every row keeps). NaN rows check that no metric and no best checkpoint
is reported and that every metrics file left parses as strict JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from harness import (
    RUN_FILES,
    TOY,
    VISION,
    Drill,
    Step,
    copy_run,
    image_folder,
    play_row,
    play_with_assets,
    user_files,
)
from PIL import Image

NLP_REGRESSION = ["task=nlp/bert", "task.data.task_type=regression", "task.monitor=val/pearson", "task.mode=max"]
SIGHUP_AT_STEP_3 = ["+callbacks.sig._target_=signal_after.SignalAfter", "+callbacks.sig.step=3",
                    "+callbacks.sig.name=SIGHUP"]


def rows() -> list[Drill]:
    return [
        # non-finite numbers
        Drill("train-nan-loss-stops-the-run",
              [Step([*TOY, "task.module.lr=1e30", "hydra.run.dir=run"], 2,
                    r"training loss is nan at step \d+ .*diverged.*learning rate")],
              check=lambda w, c: (no_result(w, c[0]), nothing_left(w / "run")),
              promise="a loss that turns NaN stops the run at that step (exit 2, one line naming the step and the "
                      "likely causes); no metric, no best checkpoint, nothing left of a run that saved none"),
        Drill("predict-a-checkpoint-with-nan-weights",
              [Step(["ckpt_path=run", "input=1,1,1,1"], 2, "holds non-finite weights")],
              setup=nan_weights, check=lambda w, c: no_result(w, c[0]),
              promise="predict of a diverged run's checkpoint is one line that says so, not a \"prob\": NaN"),
        Drill("export-a-checkpoint-with-nan-weights",
              [Step(["ckpt_path=run", "export.format=torchscript", "export.out=exp"], 2, "holds non-finite weights")],
              setup=nan_weights, check=lambda w, c: no_result(w, c[0]),
              promise="export of such a checkpoint names the weights, not the parity check"),
        Drill("train-nlp-regression-label-nan",
              [Step([*NLP_REGRESSION, "task.data.train_file=train.tsv", "hydra.run.dir=run"], 2,
                    r"train.tsv:8: label 'nan' is not a number"),
               Step([*NLP_REGRESSION, "task.data.train_file=inf.tsv", "hydra.run.dir=run"], 2,
                    r"inf.tsv:8: label 'inf' is not a number")],
              setup=nan_labels, check=lambda w, c: nothing_left(w / "run"),
              promise="an nlp regression label written nan or inf is refused as non-numeric, before any model is "
                      "built (a NaN loss from its first batch)"),
        # images and inputs that are not what they look like
        Drill("train-an-empty-class-folder",
              [Step([*VISION, "task.data.root=data", "hydra.run.dir=run"], 2, "without images: wasps")],
              setup=empty_class, check=lambda w, c: nothing_left(w / "run"),
              promise="train/wasps/ and val/wasps/ without images: refused in one line naming it, not a third class"),
        Drill("predict-a-phone-photo-with-exif-orientation",
              [Step(["ckpt_path=run", "input=pics"])], setup=phone_photo,
              check=lambda w, c: same_top(c[0], "phone.jpg", "upright.jpg"),
              promise="a JPEG stored sideways with EXIF Orientation=6 predicts as its upright copy"),
        Drill("predict-a-20000x20000-png-alone-and-in-a-folder",
              [Step(["ckpt_path=run", "input=pics/big.png"], 2, "too large to decode"),
               Step(["ckpt_path=run", "input=pics"])], setup=huge_picture,
              check=lambda w, c: answered(c[1], {"big.png": "error", "good.png": "top_k"}),
              promise="a picture over PIL's pixel bound is one line; in a folder its own error row, the good image "
                      "still answered"),
        Drill("predict-input-that-is-not-a-regular-file",
              [Step(["ckpt_path=run", "input=/dev/zero"], 2, "is not a regular file"),
               Step(["ckpt_path=run", "input=fifo"], 2, "is not a regular file")],
              setup=lambda w, a: (copy_run(a["vision"], w / "run"), os.mkfifo(w / "fifo")),
              promise="input=/dev/zero or a FIFO: one line saying it is not a regular file (was \"not found\")"),
        # options applied or refused
        Drill("predict-a-misspelt-or-unknown-predict-key",
              [Step(["ckpt_path=run", "input=pics", "predict.topk=1"], 2, "did you mean predict.top_k"),
               Step(["ckpt_path=run", "input=pics", "+predict.banana=1"], 2, "reads no predict.banana")],
              setup=vision_and_pictures,
              promise="predict.topk=1 or +predict.banana=1 is refused with the keys the task reads, not dropped"),
        Drill("predict-top-k-below-one",
              [Step(["ckpt_path=run", "input=pics", "predict.top_k=-3"], 2, "predict.top_k=-3 must be")],
              setup=vision_and_pictures, promise="predict.top_k=-3: one line, not a topk traceback"),
        Drill("list-with-an-extra-word",
              [Step(["list", "vision/resnet", "extra"], 2, "at most one task")],
              promise="zoo list vision/resnet extra: the extra word is refused, not ignored"),
        # tracebacks where one line is due
        Drill("train-seed-out-of-range",
              [Step([*TOY, "seed=-1", "hydra.run.dir=run"], 2, "seed=-1 must be a whole number from 0"),
               Step([*TOY, "seed=99999999999", "hydra.run.dir=run"], 2, "seed=99999999999 must")],
              check=lambda w, c: nothing_left(w / "run"),
              promise="a seed outside numpy's 0..2^32-1 is one line before the run folder exists"),
        Drill("train-deleting-a-key-the-zoo-needs",
              [Step([*TOY, "~task"], 2, "~task deletes a key the zoo needs"),
               Step([*TOY, "~seed"], 2, "~seed deletes a key the zoo needs")],
              promise="'~task' or '~seed': one line, not an interpolation traceback mid-run"),
        Drill("train-run-dir-name-over-255-bytes",
              [Step([*TOY, f"hydra.run.dir=runs/{'x' * 300}"], 2, "over the 255 a file name may have")],
              check=lambda w, c: nothing_left(w / "runs"),
              promise="a hydra.run.dir component over 255 bytes: one line, not ENAMETOOLONG's traceback"),
        Drill("train-run-dir-empty",
              [Step([*TOY, "hydra.run.dir="], 2, "hydra.run.dir is empty")],
              setup=lambda w, a: user_files(w), check=lambda w, c: only_files(w, ["model.json", "notes.txt", "sub"]),
              promise="hydra.run.dir= (empty) is refused instead of writing the run among your files"),
        Drill("train-disk-full-at-the-first-checkpoint",
              [Step([*TOY, "+callbacks.full._target_=disk_full.DiskFull", "hydra.run.dir=run"], 2,
                    "disk full while saving .*no earlier checkpoint")],
              check=lambda w, c: nothing_left(w / "run"),
              promise="ENOSPC at the first checkpoint (simulated: tests/disk_full.py): one line, nothing left"),
        # messages
        Drill("train-sighup-mid-work-then-resume",
              [Step([*TOY, *SIGHUP_AT_STEP_3, "hydra.run.dir=run"], 143, "stopped by SIGTERM.*ckpt_path="),
               Step(["ckpt_path=run", "trust_artifact=true"])], may_change=RUN_FILES,  # its own test callback
              check=lambda w, c: assert_in("zoo: finished", c[1]),
              promise="SIGHUP (the terminal closed) stops as SIGTERM does: last.ckpt kept, no temp file, resumable"),
        Drill("test-a-legacy-format-checkpoint",
              [Step(["ckpt_path=run/checkpoints/last.ckpt"])], setup=legacy_checkpoint,
              check=lambda w, c: assert_in('"test/acc"', c[0]),
              promise="a checkpoint in torch's legacy (non-zip) format is loaded (weights_only), not called "
                      "\"not a PyTorch file at all\""),
    ]


# ------------------------------------------------------------------------------------------ setups and checks
def nan_weights(where: Path, assets: dict) -> None:
    """The toy run with every checkpoint's first weight set to NaN (as a diverged run leaves them)."""
    import torch

    copy_run(assets["toy"], where / "run")
    for ckpt in (where / "run" / "checkpoints").glob("*.ckpt"):
        state = torch.load(ckpt, weights_only=True)
        first = next(k for k, v in state["state_dict"].items() if v.is_floating_point())
        state["state_dict"][first] = torch.full_like(state["state_dict"][first], float("nan"))
        torch.save(state, ckpt)


def nan_labels(where: Path, assets: dict) -> None:
    for name, word in (("train.tsv", "nan"), ("inf.tsv", "inf")):
        rows = [(word if i == 7 else str(i % 5), f"text number {i}") for i in range(20)]
        (where / name).write_text("".join(f"{label}\t{text}\n" for label, text in rows))


def vision_and_pictures(where: Path, assets: dict) -> None:
    copy_run(assets["vision"], where / "run")
    shutil.copytree(assets["images"] / "val" / "ants", where / "pics")


def empty_class(where: Path, assets: dict) -> None:
    shutil.copytree(assets["images"], where / "data")
    for split in ("train", "val"):
        (where / "data" / split / "wasps").mkdir()


def phone_photo(where: Path, assets: dict) -> None:
    """A portrait picture (red top, blue bottom) as a phone stores it, sideways with EXIF Orientation=6, and its
    upright copy. Solid 8x8 blocks without chroma subsampling decode exactly either way round, so the two predict
    alike to the last digit once the orientation is applied."""
    copy_run(assets["vision"], where / "run")
    pics = where / "pics"
    pics.mkdir()
    seen = Image.new("RGB", (32, 64), (0, 0, 255))
    seen.paste((255, 0, 0), (0, 0, 32, 32))
    seen.save(pics / "upright.jpg", quality=100, subsampling=0)
    exif = Image.Exif()
    exif[0x0112] = 6
    seen.transpose(Image.Transpose.ROTATE_90).save(pics / "phone.jpg", quality=100, subsampling=0, exif=exif)


def huge_picture(where: Path, assets: dict) -> None:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    copy_run(assets["vision"], where / "run")
    pics = where / "pics"
    image_folder(where / "one", ("good",), per_class=1)
    pics.mkdir()
    shutil.copy(where / "one" / "val" / "good" / "0.png", pics / "good.png")
    shutil.rmtree(where / "one")
    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)  # a 20000x20000 PNG's header: all PIL checks
    (pics / "big.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                                   + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def legacy_checkpoint(where: Path, assets: dict) -> None:
    import torch

    copy_run(assets["toy"], where / "run")
    last = where / "run" / "checkpoints" / "last.ckpt"
    torch.save(torch.load(last, weights_only=True), last, _use_new_zipfile_serialization=False)


def rows_printed(console: str) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in map(json.loads, (x for x in console.splitlines() if x.startswith("{")))}


def same_top(console: str, a: str, b: str) -> None:
    rows = rows_printed(console)
    assert rows[a]["top_k"] == rows[b]["top_k"], console[-1500:]


def answered(console: str, want: dict[str, str]) -> None:
    rows = rows_printed(console)
    assert {name: next(k for k in ("error", "top_k") if k in r) for name, r in rows.items()} == want, console[-1500:]


def assert_in(text: str, console: str) -> None:
    assert text in console, console[-1500:]


def only_files(folder: Path, names: list[str]) -> None:
    assert sorted(p.name for p in folder.iterdir()) == names, sorted(p.name for p in folder.iterdir())


def nothing_left(run: Path) -> None:
    assert not run.exists(), sorted(str(p) for p in run.rglob("*"))


def strict(text: str) -> object:
    def bare(word: str) -> None:
        raise AssertionError(f"{word} in a JSON file")

    return json.loads(text, parse_constant=bare)


def no_result(where: Path, console: str) -> None:
    """No metric printed, no best checkpoint named, no NaN printed, every metrics file strict JSON."""
    assert "best checkpoint:" not in console and "zoo: finished" not in console, console[-1500:]
    printed = [line for line in console.splitlines() if line.startswith("{")]
    assert not re.search(r":\s*(NaN|Infinity)", console) and not printed, console[-1500:]
    for f in where.rglob("*.json"):
        strict(f.read_text())


@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill: Drill, assets, tmp_path):
    if drill.steps[0].args[0] == "list":  # a verb the harness's prefixing does not know: the row names it itself
        play_with_assets(drill, assets, tmp_path)
    else:
        play_row(drill, assets, tmp_path)
