"""Test helpers for every domain: run the real CLI in a subprocess, compose configs in-process.

Imported by tests/conftest.py (fixture `run_zoo`) and by domain tests (`from zoo.testing import TINY, compose`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Short-run overrides every end-to-end test can start from (CPU, a few batches, one epoch).
TINY = ["trainer=debug", "trainer.max_epochs=1", "trainer.enable_progress_bar=false"]

# No test may touch the network: hub lookups go straight to the (empty) local cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def zoo_env(cwd: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env.update({"ZOO_OUTPUT_ROOT": str(cwd / "outputs"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "2")})
    env.update(extra)
    return env


def make_runner(tmp_path: Path):
    """run("train", "task=...", ...) -> CompletedProcess with stdout+stderr in .stdout, run in tmp_path."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 300, check: bool = False,
            env: dict | None = None) -> subprocess.CompletedProcess:
        where = cwd or tmp_path
        proc = subprocess.run([sys.executable, "-m", "zoo", *args], cwd=where, env=zoo_env(where, **(env or {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"zoo {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
        return proc

    return run


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one `zoo: error:` line of a refused command (exit 2, no traceback); fails the test otherwise."""
    assert proc.returncode == 2, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    return errors[0]


def compose(overrides: list[str] | None = None):
    """The composed train config, with a fixed run_dir (Hydra's run-dir interpolation needs a Hydra app)."""
    from zoo.core.config import compose as compose_config
    from zoo.core.config import register_resolvers

    register_resolvers()
    return compose_config(["run_dir=/tmp/zoo-test-run", *(overrides or [])])


def run_dirs(root: Path, task: str) -> list[Path]:
    base = root / "outputs" / task
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(("test_", "predict_"))) \
        if base.is_dir() else []


class SigtermAfter:
    """A test callback that sends this process a real SIGTERM once training crosses `step` optimizer steps, so a
    test can stop a run mid-epoch deterministically (as SLURM or `kill` would) and then resume it.

    It fires only when the run started below `step`: the resumed run, which re-applies the same overrides, goes on.
    Add it with `+callbacks.sigterm._target_=zoo.testing.SigtermAfter +callbacks.sigterm.step=N`.
    """

    def __new__(cls, step: int):  # noqa: ANN204 - built lazily so importing zoo.testing needs no lightning
        import signal

        from lightning.pytorch.callbacks import Callback

        class _SigtermAfter(Callback):
            def __init__(self) -> None:
                self.start: int | None = None

            def on_train_start(self, trainer, pl_module) -> None:  # noqa: ANN001
                self.start = trainer.global_step

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
                if self.start is not None and self.start < step <= trainer.global_step:
                    self.start = None
                    os.kill(os.getpid(), signal.SIGTERM)

        return _SigtermAfter()


SIGTERM_AT = "+callbacks.sigterm._target_=zoo.testing.SigtermAfter"


class ChildAbortsAtExit:
    """A test callback with which a DDP child (global rank > 0) ends by SIGABRT after its run finished, as a crash
    in a library's shutdown does (gloo's "terminate called after throwing ..."). Add it with
    `+callbacks.abort._target_=zoo.testing.ChildAbortsAtExit`."""

    def __new__(cls):  # noqa: ANN204 - built lazily so importing zoo.testing needs no lightning
        import atexit

        from lightning.pytorch.callbacks import Callback

        class _ChildAbortsAtExit(Callback):
            def on_fit_start(self, trainer, pl_module) -> None:  # noqa: ANN001
                if trainer.global_rank > 0:
                    atexit.register(os.abort)

        return _ChildAbortsAtExit()


ABORT_AT_EXIT = "+callbacks.abort._target_=zoo.testing.ChildAbortsAtExit"


def tone_manifest(where: Path) -> list[str]:
    """Eight short tones labelled "one" / "two" and their manifest in `where`: the overrides that train a speech
    manifest task on them in seconds (train and validation on the same eight files)."""
    import json

    import numpy as np
    import soundfile as sf

    rows = []
    for i in range(8):
        t = np.arange(int(8000 * (0.3 + 0.05 * i))) / 8000
        sf.write(where / f"{i}.wav", (0.5 * np.sin(2 * np.pi * (440 + 440 * (i % 2)) * t)).astype(np.float32), 8000)
        rows.append({"audio_filepath": f"{i}.wav", "duration": len(t) / 8000, "text": ["one", "two"][i % 2]})
    manifest = where / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [f"task.data.train_manifest={manifest}", f"task.data.val_manifest={manifest}"]
