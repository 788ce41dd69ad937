"""arch=whisper through every verb on a tiny random-weight encoder (no package, no download): train with the encoder
frozen for an epoch, SIGTERM mid-epoch and resume, test, predict 8 and 16 kHz files, ONNX export (waveform in,
dynamic length) with parity and int8, serve, bench and reproduce."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from zoo.testing import SIGTERM_AT, TINY, run_dirs, zoo_env

pytestmark = pytest.mark.slow
ENV = {"OMP_NUM_THREADS": "1"}
WHISPER = [*TINY, "experiment=speech_whisper_finetune", "task.module.pretrained=false", "logger=csv",
           "task.module.model={d_model: 16, layers: 1, heads: 2, ffn: 32, silence_lead: 0.05, silence_tail: 0.1}",
           "task.data.batch_size=2"]


def _serve_once(ckpt: Path, cwd: Path, files: list[Path]) -> list[dict]:
    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "zoo", "serve", f"ckpt_path={ckpt}", f"serve.port={port}"],
                            cwd=cwd, env=zoo_env(cwd, **ENV), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "server did not come up"
                time.sleep(0.5)
        out = []
        for f in files:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=f.read_bytes(),
                                         headers={"content-type": "audio/wav"})
            with urllib.request.urlopen(req, timeout=30) as r:
                out.append(json.loads(r.read()))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_whisper_sigterm_mid_epoch_and_resume(run_zoo, tmp_path, tone_manifest):
    args = [*WHISPER, *tone_manifest, "trainer.max_epochs=2", "task.module.freeze_encoder_epochs=1",
            "test_after_fit=false"]
    # trainer=debug: 3 batches an epoch; SIGTERM after step 4 is mid-way through the second (unfrozen) epoch
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=4", env=ENV)
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    (run,) = run_dirs(tmp_path, "speech/ctc")
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4 and ckpt["hyper_parameters"]["arch"] == "whisper"
    assert ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 1
    stopped_at = {k: v for k, v in ckpt["state_dict"].items() if k.startswith("model.encoder.")}
    resumed = run_zoo("train", f"ckpt_path={run}", env=ENV)
    assert resumed.returncode == 0 and "`max_epochs=2` reached" in resumed.stdout, resumed.stdout[-3000:]
    after = torch.load(last, map_location="cpu", weights_only=True)
    assert after["global_step"] == 6
    assert any(not torch.equal(after["state_dict"][k], v) for k, v in stopped_at.items())  # the encoder trains


def test_whisper_train_test_predict_export_serve_bench_reproduce(run_zoo, tmp_path, tone_manifest):
    data = tone_manifest
    run_zoo("train", *WHISPER, *data, "trainer.max_epochs=2", "task.module.freeze_encoder_epochs=1", check=True,
            env=ENV)
    (run,) = run_dirs(tmp_path, "speech/ctc")
    last = run / "checkpoints" / "last.ckpt"
    assert "test/cer" in run_zoo("test", f"ckpt_path={last}", check=True, env=ENV).stdout
    pred = run_zoo("predict", f"ckpt_path={last}", f"input={tmp_path}", check=True, env=ENV).stdout
    rows = {Path(r["file"]).name: r for r in map(json.loads, (x for x in pred.splitlines() if x.startswith("{")))}
    assert rows["0.wav"]["duration"] == pytest.approx(0.3) and rows["wide.wav"]["duration"] == pytest.approx(0.5)
    assert all(isinstance(r["text"], str) for r in rows.values()) and len(rows) == 9

    out = tmp_path / "onnx"
    run_zoo("export", f"ckpt_path={last}", f"export.out={out}", "export.samples=8", check=True, env=ENV)
    meta = json.loads((out / "model.json").read_text())
    assert [i["name"] for i in meta["inputs"]] == ["wave", "lengths"] and meta["inputs"][0]["shape"][1] == "samples"
    assert meta["parity"]["fp32"]["ok"] and meta["parity"]["fp32"]["agreement"] == 1.0
    run_zoo("export", f"ckpt_path={last}", f"export.out={tmp_path / 'int8'}", "export.quantize=int8",
            "export.samples=8", check=True, env=ENV)
    assert "int8" in json.loads((tmp_path / "int8" / "model.json").read_text())["parity"]

    served = _serve_once(last, tmp_path, [tmp_path / "0.wav", tmp_path / "wide.wav"])
    assert all(isinstance(r["text"], str) for r in served)

    bench = run_zoo("bench", *WHISPER, *data, "bench.batch_size=[2]", "bench.steps=2", "bench.warmup=1", env=ENV)
    assert bench.returncode == 0, bench.stdout[-3000:]
    again = run_zoo("reproduce", str(run), "reproduce.tolerance=1.0", env=ENV)
    assert again.returncode == 0 and "val/cer" in again.stdout, again.stdout[-3000:]
