"""A task added outside the zoo, in three files (tests/toy_task: a config, the module with its data, the hooks) and
no edit under zoo/ or configs/: every verb runs on it (docs/architecture.md, "Add a task")."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from zoo.testing import ROOT, zoo_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_task_added_outside_the_zoo_trains_tests_predicts_exports_serves_and_benches(tmp_path):
    ext = tmp_path / "ext"
    shutil.copytree(Path(__file__).parent / "toy_task", ext)
    env = zoo_env(tmp_path, ZOO_CONFIG_PATH=str(ext / "configs"), PYTHONPATH=f"{ROOT}:{ext}", OMP_NUM_THREADS="1")

    def zoo(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "zoo", *args], cwd=tmp_path, env=env, text=True, timeout=300,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.returncode == 0, f"zoo {' '.join(args)}:\n{proc.stdout[-3000:]}"
        return proc

    assert "toy/blobs" in zoo("list").stdout and "mlp" in zoo("list", "toy/blobs").stdout
    train = zoo("train", "task=toy/blobs", "trainer.enable_progress_bar=false")
    assert "zoo: finished toy/blobs" in train.stdout
    (run,) = [p for p in (tmp_path / "outputs" / "toy" / "blobs").iterdir() if p.is_dir()]
    acc = float(json.loads(zoo("test", f"ckpt_path={run}").stdout.strip().splitlines()[-1])["test/acc"])
    assert acc > 0.9  # blobs three standard deviations apart: a working loop separates them

    rows = [json.loads(line) for line in zoo("predict", f"ckpt_path={run}", "input=-3,-3,-3,-3;6,6,6,6").stdout
            .splitlines() if line.startswith("{")]
    assert [r["label"] for r in rows] == [0, 1]

    zoo("export", f"ckpt_path={run}", "export.format=torchscript")
    meta = json.loads((run / "export" / "model.json").read_text())
    assert meta["deploy_hooks"] == "toy.hooks" and meta["parity"]["torchscript"]["ok"]

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "zoo", "serve", f"ckpt_path={run / 'export'}",
                               f"serve.port={port}"], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        answer = None
        for _ in range(120):  # at most 60 s to start
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=b'{"x": [6, 6, 6, 6]}',
                                             headers={"content-type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as r:
                    answer = json.loads(r.read())
                break
            except OSError:
                if server.poll() is not None:
                    break
                time.sleep(0.5)
        assert answer is not None and answer["label"] == 1, server.stdout.read() if server.poll() is not None else ""
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    bench = zoo("bench", "task=toy/blobs", "bench.steps=5", "bench.warmup=2")
    assert "points" in bench.stdout
