"""The trust drills: an artifact (a checkpoint, an export folder, a run folder) handed to the user is data, never
code (zoo/core/trust.py). Each security row keeps a victim file (its checksum must not change: the harness checks
every file that existed before) and a marker file that the hostile artifact would write if its code ran (it must not
appear); the others hold a broken record to one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from harness import RUN_FILES, Drill, Step, copy_run, play_row

MARKER = "marker.txt"
VICTIM = "victim.txt"


def victim(w: Path) -> None:
    (w / VICTIM).write_text("precious\n")


def no_marker(w: Path, consoles: list[str]) -> None:
    assert not (w / MARKER).exists(), "the artifact's code ran: the marker file appeared"
    assert (w / VICTIM).read_text() == "precious\n"


def evil_checkpoint(src: Path, dst: Path, w: Path) -> Path:
    """A data-only checkpoint (it loads with weights_only=True) whose recorded overrides add two callbacks that
    Hydra would build with builtins.open: one truncates the victim, the other writes the marker."""
    ck = torch.load(src, weights_only=True)
    for name, file in (("pwn", w / VICTIM), ("pwn2", w / MARKER)):
        ck["zoo"]["overrides"] += [f"+callbacks.{name}._target_=builtins.open", f"+callbacks.{name}.file={file}",
                                   f"+callbacks.{name}.mode=w"]
    dst.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ck, dst)
    return dst


def run_naming_a_folder_outside(w: Path, a: dict) -> None:
    """A toy run whose checkpoint records checkpoint and log folders outside it (the marker's path)."""
    victim(w)
    copy_run(a["toy"], w / "run")
    last = w / "run" / "checkpoints" / "last.ckpt"
    ck = torch.load(last, weights_only=True)
    ck["zoo"]["overrides"] += [f"callbacks.{name}.dirpath={w / MARKER}" for name in ("model_checkpoint",
                                                                                     "last_checkpoint")]
    ck["zoo"]["overrides"] += [f"logger.tensorboard.save_dir={w / MARKER}"]
    torch.save(ck, last)


def evil_run(w: Path, a: dict) -> None:
    victim(w)
    copy_run(a["toy"], w / "run")
    evil_checkpoint(a["toy"] / "checkpoints" / "last.ckpt", w / "run" / "checkpoints" / "last.ckpt", w)
    evil_checkpoint(a["toy"] / "checkpoints" / "last.ckpt", w / "evil.ckpt", w)


def toy_export(w: Path, a: dict, folder: Path, **meta: object) -> Path:
    """The toy run's export copied to `folder`, its model.json changed by `meta` (None removes a key)."""
    shutil.copytree(a["toy_export"], folder, dirs_exist_ok=True)
    found = json.loads((folder / "model.json").read_text())
    found.update(meta)
    (folder / "model.json").write_text(json.dumps({k: v for k, v in found.items() if v is not None}))
    return folder


def old_export_naming(w: Path, a: dict, name: str) -> None:
    victim(w)
    copy_run(a["toy"], w / "run")
    toy_export(w, a, w / "ex", files=None, file=name.replace("<w>", str(w)))


def evil_module_export(w: Path, a: dict) -> None:
    """An export folder served from inside it, shipping evil_mod.py and naming it as its deploy hooks."""
    victim(w)
    toy_export(w, a, w, deploy_hooks="evil_mod")
    (w / "evil_mod.py").write_text(f"open({str(w / MARKER)!r}, 'w').write('ran')\nopen({str(w / VICTIM)!r}, 'w')\n")


def older_generation_run(w: Path, a: dict) -> None:
    """A run recorded under an older preset generation: an override its presets took then that today's config lacks."""
    copy_run(a["toy"], w / "run")
    path = w / "run" / "checkpoints" / "last.ckpt"
    ck = torch.load(path, weights_only=True)
    ck["zoo"]["overrides"] += ["task.data.noise_then=0.5"]
    ck["zoo"]["presets"] = 0
    torch.save(ck, path)


def no_zen(w: Path, consoles: list[str]) -> None:
    assert "Beautiful is better than ugly" not in consoles[0], "model.json's module was imported"


def port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REFUSED = "allow-list.*trust_artifact=true"


def rows() -> list[Drill]:
    return [
        Drill("export-over-an-old-export-naming-a-file-outside-it",
              [Step(["ckpt_path=run", "export.out=ex"], 2, "names '../victim.txt', a path outside")],
              setup=lambda w, a: old_export_naming(w, a, "../victim.txt"), check=no_marker,
              promise="an older model.json naming ../victim.txt as its file: refused, the victim kept"),
        Drill("export-over-an-old-export-naming-an-absolute-path",
              [Step(["ckpt_path=run", "export.out=ex"], 2, "a path outside")],
              setup=lambda w, a: old_export_naming(w, a, f"<w>/{VICTIM}"), check=no_marker,
              promise="the same with an absolute path"),
        Drill("export-keeps-a-users-empty-folder-in-its-folder",
              [Step(["ckpt_path=run", "export.out=ex"]),
               Step(["ckpt_path=run", "export.out=ex"], 2, "folders that its earlier export did not make \\(mine\\)",
                    before=lambda w: (w / "ex" / "mine").mkdir())],
              setup=lambda w, a: copy_run(a["toy"], w / "run"), may_change=["ex/*"],
              check=lambda w, c: (w / "ex" / "mine").is_dir() or pytest.fail("the user's empty folder was removed"),
              promise="a later export removes only what the earlier one listed: an empty folder of yours stops it"),
        Drill("test-a-checkpoint-recording-builtins-open",
              [Step(["ckpt_path=evil.ckpt"], 2, REFUSED)], setup=evil_run, check=no_marker,
              promise="a data-only checkpoint whose recorded overrides add a callback: refused, nothing opened"),
        Drill("predict-a-checkpoint-recording-builtins-open",
              [Step(["predict", "ckpt_path=evil.ckpt", "input=0,0,0,0"], 2, REFUSED)], setup=evil_run,
              check=no_marker, promise="the same in predict"),
        Drill("resume-a-checkpoint-recording-builtins-open",
              [Step(["ckpt_path=run"], 2, REFUSED)], setup=evil_run, check=no_marker,
              promise="the same in a resume"),
        Drill("resume-a-checkpoint-recording-folders-outside-its-run",
              [Step(["ckpt_path=run", "trainer.max_epochs=4"])], setup=run_naming_a_folder_outside,
              may_change=RUN_FILES, check=no_marker,
              promise="a checkpoint's recorded checkpoint and log folders are not carried: a resume writes into "
                      "its own run folder"),
        Drill("reproduce-a-run-recording-builtins-open",
              [Step(["reproduce", "run"], 2, REFUSED)], setup=evil_run, check=no_marker,
              promise="the same in reproduce"),
        Drill("serve-an-export-naming-a-module",
              [Step(["serve", "ckpt_path=ex", f"serve.port={port()}"], 2, "allow-list.*: this;")],
              setup=lambda w, a: toy_export(w, a, w / "ex", deploy_hooks="this"), check=no_zen,
              promise="model.json's deploy_hooks naming any module: refused, never imported"),
        Drill("serve-an-export-shipping-its-own-module",
              [Step(["serve", "ckpt_path=.", f"serve.port={port()}"], 2, "allow-list.*: evil_mod;")],
              setup=evil_module_export, check=no_marker,
              promise="an export folder shipping evil_mod.py, served from inside it: never imported"),
        Drill("serve-an-export-naming-etc-passwd",
              [Step(["serve", "ckpt_path=ex", f"serve.port={port()}"], 2, "'/etc/passwd', a path outside")],
              setup=lambda w, a: toy_export(w, a, w / "ex", file="/etc/passwd"),
              promise="model.json's file outside its folder: refused, never opened"),
        Drill("serve-an-export-with-a-truncated-model",
              [Step(["serve", "ckpt_path=ex", f"serve.port={port()}"], 2, "does not load as a onnx model")],
              setup=lambda w, a: (toy_export(w, a, w / "ex"), (w / "ex" / "model.onnx").write_bytes(
                  (a["toy_export"] / "model.onnx").read_bytes()[:200])),
              promise="a model file cut short: one line"),
        Drill("serve-an-export-with-a-broken-model-json",
              [Step(["serve", "ckpt_path=ex", f"serve.port={port()}"], 2, "does not read as JSON")],
              setup=lambda w, a: (toy_export(w, a, w / "ex"), (w / "ex" / "model.json").write_text('{"task": "to')),
              promise="a model.json cut short: one line"),
        Drill("reproduce-a-run-with-a-broken-config-yaml",
              [Step(["reproduce", "run"], 2, "config.yaml does not parse")],
              setup=lambda w, a: (copy_run(a["toy"], w / "run"), (w / "run" / "config.yaml").write_text("config: [")),
              promise="a run folder whose config.yaml is cut short: one line"),
        Drill("reproduce-a-run-with-a-broken-env-json",
              [Step(["reproduce", "run"], 2, "env.json does not parse")],
              setup=lambda w, a: (copy_run(a["toy"], w / "run"), (w / "run" / "env.json").write_text('{"a":')),
              promise="a run folder whose env.json is cut short: one line"),
        Drill("reproduce-sigterm-as-its-re-run-ends",
              [Step(["reproduce", "run"], 143, "stopped by SIGTERM", signal="SIGTERM", signal_when="zoo: time:")],
              setup=lambda w, a: copy_run(a["toy"], w / "run"),
              promise="SIGTERM just after the re-run finished: 143 and the stop line"),
        Drill("resume-a-run-of-an-older-preset-generation",
              [Step(["ckpt_path=run", "trainer.max_epochs=4"])], setup=older_generation_run, may_change=RUN_FILES,
              check=lambda w, c: "no longer compose" in c[0] or pytest.fail(c[0][-1500:]),
              promise="a run whose recorded overrides no longer compose resumes from its record, as zoo test does"),
    ]


@pytest.fixture(scope="module")
def trust_assets(assets, tmp_path_factory) -> dict[str, Path]:
    """The shared assets and the toy run's ONNX export, made once."""
    from harness import run_step

    out = tmp_path_factory.mktemp("trust-assets") / "export"
    rc, console = run_step(out.parent, Step(["export", f"ckpt_path={assets['toy']}", f"export.out={out}"]))
    assert rc == 0, console[-3000:]
    return {**assets, "toy_export": out}


@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill, trust_assets, tmp_path):
    play_row(drill, trust_assets, tmp_path)
