"""The hostile drills, one row per case, each held to the same properties (harness.py): exit code in {0, 2, 130,
143}, no traceback, one error/stop line where it fails, the user's files unchanged, no temp files left.

The rows run on the toy task (tests/toy_task) and, where images matter, a tiny vision run: seconds each. docs/drills.md
lists what each row promises.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from harness import (
    RUN_FILES,
    SIGTERM_AT_STEP_3,
    SIGTERM_IN_TEST,
    TOY,
    VISION,
    Drill,
    Step,
    copy_run,
    image_folder,
    play_row,
    run_step,
    user_files,
)
from PIL import Image


def best_line(console: str) -> str:
    return Path(re.search(r"best checkpoint:\s+(\S+)", console).group(1)).name


def printed_metrics(console: str) -> dict[str, str]:
    return dict(re.findall(r"^  ((?:val|test)/\S+)\s+(\S+)$", console, re.M))


# ---------------------------------------------------------------------------------------------------- rows
def rows() -> list[Drill]:
    return [
        # the zoo deletes nothing it did not create
        Drill("train-bad-input-into-a-users-folder",
              [Step([*VISION, "task.data.root=missing", "hydra.run.dir=mine"], 2, "image folder not found")],
              setup=lambda w, a: user_files(w / "mine"),
              promise="a run refused after its folder was set up removes only what it added to a folder of yours"),
        Drill("train-bad-input-into-the-dataset-folder",
              [Step([*VISION, "task.data.root=data", "hydra.run.dir=data"], 2, "unreadable image")],
              setup=lambda w, a: (shutil.copytree(a["images"], w / "data"),
                                  (w / "data" / "train" / "ants" / "broken.png").write_bytes(b"not a png")),
              promise="hydra.run.dir set to the dataset itself: the dataset stays whole"),
        Drill("train-ctrl-c-at-start-up-into-a-users-folder",
              [Step([*TOY, "hydra.run.dir=mine"], 130, "stopped by Ctrl-C", signal="SIGINT", signal_after=3)],
              setup=lambda w, a: user_files(w / "mine"),
              promise="Ctrl-C while the run starts: exit 130, your folder as it was"),
        Drill("train-sigterm-mid-work-then-resume-in-a-users-folder",
              [Step([*TOY, *SIGTERM_AT_STEP_3, "hydra.run.dir=run"], 143, "stopped by SIGTERM.*ckpt_path="),
               Step(["ckpt_path=run", "trust_artifact=true"])],  # the run's own test callback (tests/signal_after)
              setup=lambda w, a: user_files(w / "run"), may_change=RUN_FILES,
              check=lambda w, c: (assert_watch_names(w / "run", c[1]), assert_user_files(w / "run")),
              promise="SIGTERM mid-epoch keeps last.ckpt beside your files; the resume finishes and names its folder"),
        Drill("new-run-into-a-folder-a-killed-run-left",
              [Step([*TOY, "hydra.run.dir=run"], 2, "already holds .hydra, cli.log, tensorboard, which a run writes")],
              setup=killed_run_folder,
              promise="a kill -9'd run's logs are not mixed with a new run's, nor written over"),
        Drill("new-run-into-a-users-folder-holding-a-config-yaml",
              [Step([*TOY, "hydra.run.dir=mine"], 2, "already holds config.yaml")],
              setup=lambda w, a: (user_files(w / "mine"), (w / "mine" / "config.yaml").write_text("lr: 0.1\n")),
              promise="a file of yours named like a run's own (config.yaml, cli.log, ...) is never written over"),
        Drill("resume-of-a-moved-run-keeps-its-best-checkpoint",
              [Step(["ckpt_path=run", "trainer.max_epochs=5"]),
               Step(["ckpt_path=moved/run", "trainer.max_epochs=5"])],
              setup=lambda w, a: (copy_run(a["toy"], w / "run"), copy_run(a["toy"], w / "moved" / "run")),
              may_change=RUN_FILES + [f"moved/{g}" for g in RUN_FILES],
              check=lambda w, c: same_result(c[0], c[1]),
              promise="a run copied or moved elsewhere resumes with its best checkpoints and their scores"),
        # evaluation: applied or refused, never dropped; stops take back only their own folder
        Drill("test-sigterm-mid-test-with-a-users-files-in-test",
              [Step(["ckpt_path=run", *SIGTERM_IN_TEST], 143, "stopped by SIGTERM")],
              setup=lambda w, a: (copy_run(a["toy"], w / "run"), user_files(w / "run" / "test")),
              check=lambda w, c: only_user_files(w / "run" / "test"),
              promise="a stopped test removes its own log folder, nothing of yours beside it"),
        Drill("test-ctrl-c-at-start-up",
              [Step(["ckpt_path=run"], 130, "stopped by Ctrl-C", signal="SIGINT", signal_after=2)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              promise="Ctrl-C while a test starts: exit 130, the run untouched"),
        Drill("test-override-the-model-would-drop",
              [Step(["ckpt_path=run", "task.module.hidden=32"], 2, "would be dropped")],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              promise="an override that cannot reach the trained model is refused, not ignored"),
        Drill("predict-override-the-model-would-drop",
              [Step(["ckpt_path=run", "input=1,1,1,1", "task.module.hidden=32"], 2, "would be dropped")],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), promise="the same rule in predict"),
        Drill("predict-trainer-setting-it-would-drop",
              [Step(["ckpt_path=run", "input=1,1,1,1", "trainer.precision=bf16-mixed"], 2, "without a Trainer")],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              promise="a trainer setting predict does not apply (it runs without a Trainer) is refused"),
        Drill("export-into-a-users-folder-with-a-model-json",
              [Step(["ckpt_path=run", "export.format=torchscript", "export.out=mine"], 2, "other files in it")],
              setup=lambda w, a: (copy_run(a["toy"], w / "run"), user_files(w / "mine")),
              promise="export.out=<your folder holding a model.json>: refused, nothing removed"),
        Drill("export-replaces-its-own-files-only",
              [Step(["ckpt_path=run", "export.format=torchscript", "export.out=exp"]),
               Step(["ckpt_path=run", "export.format=onnx", "export.out=exp"]),
               Step(["ckpt_path=run", "export.format=torchscript", "export.out=exp"], 2, "did not write",
                    before=lambda w: (w / "exp" / "notes.md").write_text("mine")),
               ],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), may_change=["exp/*"],
              check=lambda w, c: assert_export(w / "exp", "model.onnx"),
              promise="a second export replaces the first; a file of yours added there stops the third"),
        Drill("export-ctrl-c-at-start-up",
              [Step(["ckpt_path=run", "export.format=torchscript"], 130, "stopped by Ctrl-C", signal="SIGINT",
                    signal_after=3)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              promise="Ctrl-C during an export leaves no staging folder"),
        Drill("predict-ctrl-c-at-start-up",
              [Step(["ckpt_path=run", "input=1,1,1,1"], 130, "stopped by Ctrl-C", signal="SIGINT", signal_after=2)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), promise="Ctrl-C while predict starts: exit 130"),
        Drill("serve-sigterm-while-serving",
              [Step(["serve", "ckpt_path=run", f"serve.port={free_port()}"], 0, signal="SIGTERM",
                    signal_when="listening on|Uvicorn running|serving")],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              check=lambda w, c: assert_in("server stopped by SIGTERM", c[0]),
              promise="SIGTERM stops a server by draining it, exit 0, one line"),
        Drill("serve-ctrl-c-at-start-up",
              [Step(["serve", "ckpt_path=run", f"serve.port={free_port()}"], 130, "stopped by Ctrl-C",
                    signal="SIGINT", signal_after=2)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), promise="Ctrl-C while a server starts: exit 130"),
        Drill("reproduce-sigterm-mid-rerun",
              [Step(["reproduce", "run"], 143, "stopped by SIGTERM", signal="SIGTERM", signal_when="zoo: reproducing",
                    signal_after=4)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), may_change=["run/*"],
              promise="SIGTERM reaches the re-run, which stops as a run does; the original run untouched"),
        Drill("reproduce-ctrl-c-at-start-up",
              [Step(["reproduce", "run"], 130, "stopped by Ctrl-C", signal="SIGINT", signal_after=2)],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), promise="Ctrl-C while reproduce starts: exit 130"),
        Drill("bench-sigterm-mid-bench",
              [Step(["bench", *TOY[:1], "bench.steps=5", "bench.repeats=1"], 143, "stopped by SIGTERM",
                    signal="SIGTERM", signal_when=r"zoo bench: \[1/")],
              promise="SIGTERM ends a bench as a stop (143, one line), the rows measured so far reported"),
        Drill("resume-of-a-run-killed-before-its-first-checkpoint",
              [Step(["ckpt_path=run"], 2, "no checkpoint")], setup=killed_run_folder,
              promise="a folder a kill -9 left without a checkpoint: the line says to start again"),
        # sweeps over config groups
        Drill("sweep-over-a-misspelt-task",
              [Step(["-m", "task=toy/blobs,toy/blobz"], 2, "one of the sweep's choices")],
              check=lambda w, c: no_file_named(w, "multirun.yaml"),
              promise="a sweep with one bad choice fails before any trial, leaving nothing"),
        Drill("sweep-over-presets-with-a-key-they-bring",
              [Step(["-m", "experiment=toy_narrow,toy_wide", "task.module.lr=0.05",
                     "trainer.enable_progress_bar=false", "hydra.sweep.dir=sweep"])],
              check=lambda w, c: trials_ran(w / "sweep", 2),
              promise="-m over presets with a key only the presets' task has runs every trial"),
        Drill("glob-sweep-over-presets",
              [Step(["-m", "experiment=glob(toy_*)", "trainer.enable_progress_bar=false", "hydra.sweep.dir=sweep"])],
              check=lambda w, c: trials_ran(w / "sweep", 2),
              promise="Hydra's glob() over presets runs each match"),
        Drill("train-sizes-and-probabilities-out-of-range",
              [Step(["task=vision/resnet", "task.data.image_size=-5"], 2, "image_size=-5 must be at least 1"),
               Step(["task=vision/resnet", "task.module.drop_rate=2"], 2, "is a probability"),
               Step(["task=gan/dcgan", "task.module.nz=0"], 2, "nz=0 must be at least 1"),
               Step(["task=vision/resnet", "trainer.gradient_clip_val=-1"], 2, "gradient_clip_val=-1"),
               Step(["task=vision/resnet", "task.module.optimizer._target_=torch.optim.Adamw"], 2,
                    "did you mean AdamW")],
              check=lambda w, c: no_file_named(w, "config.yaml"),
              promise="a negative size, a dropout of 2, a negative clip value (it climbed the loss) or a misspelt "
                      "optimizer is one line before any work (were tracebacks mid-run, a hang, a silent ascent)"),
        Drill("new-sweep-into-a-users-folder-with-numbered-folders",
              [Step(["-m", "experiment=toy_narrow,toy_wide", "hydra.sweep.dir=mine"], 2, "already holds 0")],
              setup=lambda w, a: (user_files(w / "mine"), user_files(w / "mine" / "0")),
              promise="a sweep never writes its trials into folders of yours named like trials (0, 1, ...)"),
        Drill("sweep-and-cfg-together", [Step(["-m", "--cfg", "job"], 2, "cannot go together")],
              promise="-m with --cfg: one line, not Hydra's traceback"),
        # images: classes and bit depth
        Drill("resume-after-a-class-folder-is-renamed",
              [Step(["ckpt_path=run", "trainer.max_epochs=2"], 2, "classes")],
              setup=lambda w, a: (copy_run(a["vision"], w / "run"), renamed_class(w, a)),
              may_change=RUN_FILES,
              promise="a resume on renamed class folders is refused instead of relabelling the model"),
        Drill("resume-after-a-class-is-added",
              [Step(["ckpt_path=run", "trainer.max_epochs=2"], 2, "classes")],
              setup=lambda w, a: (copy_run(a["vision"], w / "run"), added_class(w, a)),
              may_change=RUN_FILES, promise="a resume with one more class is one line, not a size-mismatch traceback"),
        Drill("predict-a-16-bit-png",
              [Step(["ckpt_path=run", "input=pics"])],
              setup=sixteen_bit_pictures, check=lambda w, c: same_prediction(c[0]),
              promise="a 16-bit PNG is read at its real values: it predicts as its 8-bit copy"),
    ]


# ------------------------------------------------------------------------------------------ setups and checks
def killed_run_folder(where: Path, assets: dict) -> None:
    run = where / "run"
    (run / "tensorboard").mkdir(parents=True)
    (run / ".hydra").mkdir()
    (run / "tensorboard" / "events.out.tfevents.1796000000.host.123.0").write_bytes(b"\0" * 64)
    (run / "cli.log").write_text("the killed run's log\n")


def assert_watch_names(run: Path, console: str) -> None:
    assert f"tensorboard --logdir {run}" in console or f"tensorboard --logdir {run.name}" in console, console[-800:]


def assert_user_files(folder: Path) -> None:
    assert (folder / "notes.txt").read_text() == "precious\n" and (folder / "sub" / "picture.bin").is_file()


def only_user_files(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "notes.txt", "sub"]


def same_result(in_place: str, moved: str) -> None:
    assert best_line(in_place) == best_line(moved), (in_place[-1500:], moved[-1500:])
    assert printed_metrics(in_place) == printed_metrics(moved)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_in(text: str, console: str) -> None:
    assert text in console, console[-1500:]


def assert_export(folder: Path, model: str) -> None:
    """The second export's files, and the user's note, and nothing of the first export left over."""
    meta = json.loads((folder / "model.json").read_text())
    assert meta["file"] == model and sorted(p.name for p in folder.iterdir()) == sorted([*meta["files"], "notes.md"])


def no_file_named(folder: Path, name: str) -> None:
    assert not list(folder.rglob(name)), list(folder.rglob(name))


def trials_ran(sweep: Path, n: int) -> None:
    done = sorted(p.parent.parent.name for p in sweep.glob("*/checkpoints/last.ckpt"))
    assert len(done) == n, sorted(p.name for p in sweep.iterdir())


def renamed_class(where: Path, assets: dict) -> None:
    data = where / "data"
    shutil.copytree(assets["images"], data)
    for split in ("train", "val"):
        (data / split / "bees").rename(data / split / "wasps")
    _point_run_at(where / "run", data)


def added_class(where: Path, assets: dict) -> None:
    data = where / "data"
    shutil.copytree(assets["images"], data)
    image_folder(data, ("ants", "bees", "wasps"))
    _point_run_at(where / "run", data)


def _point_run_at(run: Path, data: Path) -> None:
    """The run's recorded data root (the shared assets folder) -> this row's own copy: a resume replays the
    checkpoint's overrides, so the renamed copy is what it reads. Rewritten in the checkpoint as a user would
    resume with task.data.root=<the renamed folder>."""
    import torch

    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["zoo"]["overrides"] = [o if not o.startswith("task.data.root=") else f"task.data.root={data}"
                                for o in ckpt["zoo"]["overrides"]]
    torch.save(ckpt, last)


def sixteen_bit_pictures(where: Path, assets: dict) -> None:
    import numpy as np

    copy_run(assets["vision"], where / "run")
    pics = where / "pics"
    pics.mkdir()
    rng = np.random.default_rng(0)
    grey = (rng.random((20, 20)) * 65535).astype(np.uint16)
    Image.fromarray(grey).save(pics / "a16.png")
    Image.fromarray((grey // 257).astype(np.uint8)).save(pics / "a8.png")


def same_prediction(console: str) -> None:
    rows = {Path(r["file"]).name: r for r in map(json.loads, (x for x in console.splitlines() if x.startswith("{")))}
    top = {name: [(k["label"], round(k["prob"], 2)) for k in r["top_k"]] for name, r in rows.items()}
    assert top["a16.png"] == top["a8.png"], rows


# ------------------------------------------------------------------------------------------------ the suite
@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill: Drill, assets, tmp_path):
    play_row(drill, assets, tmp_path)


HELP_VERBS = ["test", "predict", "export", "serve", "reproduce", "bench", "list"]


def test_every_verb_answers_help(tmp_path):
    for name in HELP_VERBS:
        rc, out = run_step(tmp_path, Step([name, "--help"]))
        assert rc == 0 and out.startswith("usage: python -m zoo " + name) and "Traceback" not in out, out


def test_docs_list_every_row():
    """Every row of every row file (tests/drills/test_drills*.py, each with its own rows()) is in docs/drills.md."""
    import importlib

    from harness import ROOT

    listed = (ROOT / "docs" / "drills.md").read_text()
    files = sorted(Path(__file__).parent.glob("test_drills*.py"))
    names = [d.name for f in files for d in importlib.import_module(f.stem).rows()]
    assert len(files) >= 1 and len(names) == len(set(names)), names
    assert not [n for n in names if f"`{n}`" not in listed]
