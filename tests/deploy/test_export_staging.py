"""`zoo export` against what others do to its places meanwhile: a run still training replaces the checkpoint being
exported (the export reads one snapshot of it), and a killed export's temp folder (the next export removes it only
when the zoo's mark in it names a process that is gone; any other is named in one warning line, never removed)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import vision_ckpt  # noqa: E402

from zoo.cli import main  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit's deprecation notices


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_export_reads_one_checkpoint_while_the_run_replaces_it(tmp_path, monkeypatch, capsys):
    """Training's top-k writes a new best checkpoint and removes the old one while the export runs: the export
    loaded the weights from the path again (FileNotFoundError traceback), and recorded the sha256 of whatever file
    was there by then."""
    import zoo.verbs.export as verb
    import zoo.verbs.export_snapshot as snap

    ckpt = vision_ckpt(tmp_path / "run")
    first = sha(ckpt)
    real = verb.deploy_config

    def then_replaced(*args, **kwargs):  # the config is read; now the run replaces its best checkpoint
        out = real(*args, **kwargs)
        newer = torch.load(ckpt, weights_only=True)
        newer["state_dict"] = {k: v + 1 if v.is_floating_point() else v for k, v in newer["state_dict"].items()}
        torch.save(newer, ckpt.with_name("best-newer.ckpt"))
        ckpt.unlink()
        return out

    monkeypatch.setattr(verb, "deploy_config", then_replaced)
    (tmp_path / "system-tmp").mkdir()
    monkeypatch.setattr(snap.tempfile, "gettempdir", lambda: str(tmp_path / "system-tmp"))
    main(["export", f"ckpt_path={tmp_path / 'run'}", "export.format=torchscript", "export.samples=8"])
    meta = json.loads((tmp_path / "run" / "export" / "model.json").read_text())
    assert meta["checkpoint"] == {"path": str(ckpt.resolve()), "sha256": first}
    assert meta["parity"]["torchscript"]["ok"]
    assert list((tmp_path / "system-tmp").iterdir()) == []  # the snapshot goes with the export
    assert "Traceback" not in capsys.readouterr().err


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _staging(parent: Path, name: str, pid: int | None) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "model.ts").write_bytes(b"half written")
    if pid is not None:
        (folder / ".zoo-owner").write_text(json.dumps({"zoo": 1, "pid": pid, "host": os.uname().nodename}))
    return folder


def test_a_killed_exports_temp_folder_goes_only_when_provably_the_zoos(tmp_path, capsys):
    """kill -9 during an export left `.export.<random>.tmp` beside the export, and no later export removed or
    mentioned it. Now: marked by the zoo with a writer that is gone -> removed; marked by a writer still running
    (another export now) -> left to it; no mark (an older zoo, or not the zoo's) -> kept and named in one line."""
    ckpt = vision_ckpt(tmp_path / "run")
    run = tmp_path / "run"
    killed = _staging(run, ".export.k1ll3d.tmp", _dead_pid())
    running = _staging(run, ".export.runn1ng.tmp", os.getpid())
    unmarked = _staging(run, ".export.unmark3d.tmp", None)
    keep = sha(unmarked / "model.ts")
    main(["export", f"ckpt_path={ckpt}", "export.format=torchscript", "export.samples=8"])
    out = capsys.readouterr().out
    assert not killed.exists()
    assert running.is_dir() and sha(unmarked / "model.ts") == keep
    warnings = [line for line in out.splitlines() if line.startswith("zoo: warning:")]
    assert len(warnings) == 1 and str(unmarked) in warnings[0] and str(running) not in warnings[0], out
    assert sorted(p.name for p in run.iterdir()) == [".export.runn1ng.tmp", ".export.unmark3d.tmp", "checkpoints",
                                                     "export"]
    assert ".zoo-owner" not in json.loads((run / "export" / "model.json").read_text())["files"]
    assert not (run / "export" / ".zoo-owner").exists()
