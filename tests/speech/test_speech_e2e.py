"""speech/ctc end to end through `python -m zoo` in a subprocess: train -> test -> predict, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from zoo.testing import SIGTERM_AT, TINY, run_dirs

pytestmark = pytest.mark.slow
ENV = {"OMP_NUM_THREADS": "1"}  # tiny models: one thread is fastest on a shared 2-core machine
FAST = [*TINY, "experiment=speech_fsdd_manifests", "task.module.model={hidden: 16, layers: 1}", "task.module.n_mels=16",
        "task.data.batch_size=4", "task.data.chars='one two'", "logger=csv"]


def _corpus(root: Path) -> tuple[str, str]:
    """Sine bursts at 8 kHz standing in for speech: 'one' = 440 Hz, 'two' = 880 Hz."""
    rows = []
    for i in range(8):
        text, freq = ("one", 440.0) if i % 2 == 0 else ("two", 880.0)
        t = np.arange(int(8000 * (0.3 + 0.05 * i))) / 8000
        path = root / f"{i}.wav"
        sf.write(path, (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32), 8000)
        rows.append({"audio_filepath": path.name, "duration": len(t) / 8000, "text": text})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    return str(root / "train.jsonl"), str(root / "val.jsonl")


def test_train_test_predict_and_bad_files(run_zoo, tmp_path):
    train, val = _corpus(tmp_path)
    proc = run_zoo("train", *FAST, f"task.data.train_manifest={train}", f"task.data.val_manifest={val}", env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "test/cer" in proc.stdout
    run = run_dirs(tmp_path, "speech/ctc")[-1]
    ckpt = next((run / "checkpoints").glob("best*.ckpt"))
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["vocab"][:2] == ["<blank>", " "]  # the vocabulary travels with the weights
    assert saved["hyper_parameters"]["sample_rate"] == 8000

    folder = tmp_path / "in"
    folder.mkdir()
    t = np.arange(16000) / 16000  # 16 kHz input: resampled to the model's 8 kHz, not refused
    sf.write(folder / "a.wav", (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    sf.write(folder / "empty.wav", np.zeros(0, np.float32), 8000)
    (folder / "junk.wav").write_bytes(b"nope")
    proc = run_zoo("predict", f"ckpt_path={ckpt}", f"input={folder}", env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    rows = {Path(r["file"]).name: r for r in map(json.loads, lines)}
    assert rows["a.wav"]["duration"] == pytest.approx(1.0) and isinstance(rows["a.wav"]["text"], str)
    assert "empty" in rows["empty.wav"]["error"] and "cannot read" in rows["junk.wav"]["error"]

    # A single file is refused with one line (a folder reports it per file, as above).
    proc = run_zoo("predict", f"ckpt_path={ckpt}", f"input={folder / 'a.wav'}", "predict.max_seconds=0.5", env=ENV)
    assert proc.returncode == 2 and "zoo: error:" in proc.stdout and "longer than the 0.5 s" in proc.stdout


def test_broken_manifest_stops_with_line_number(run_zoo, tmp_path):
    train, val = _corpus(tmp_path)
    with open(train, "a") as f:
        f.write(json.dumps({"audio_filepath": "0.wav"}) + "\n")
    proc = run_zoo("train", *FAST, f"task.data.train_manifest={train}", f"task.data.val_manifest={val}", env=ENV)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "train.jsonl:9: missing field(s) text" in proc.stdout


def test_ddp_bf16_resume_and_finetune_with_new_characters(run_zoo, tmp_path):
    """DDP with 2 CPU ranks under bf16-mixed, then resume that run for one more epoch, then fine-tune its
    checkpoint on data with a character the old vocabulary lacks (appended, old rows kept)."""
    train, val = _corpus(tmp_path)
    data = [f"task.data.train_manifest={train}", f"task.data.val_manifest={val}"]
    proc = run_zoo("train", *FAST, *data, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                   "trainer.precision=bf16-mixed", "trainer.num_sanity_val_steps=0", env=ENV, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:]
    run = run_dirs(tmp_path, "speech/ctc")[-1]
    last = run / "checkpoints" / "last.ckpt"
    before = torch.load(last, map_location="cpu", weights_only=True)

    proc = run_zoo("train", f"ckpt_path={run}", "trainer.max_epochs=2", "trainer.enable_progress_bar=false", env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:]
    after = torch.load(last, map_location="cpu", weights_only=True)  # same run dir, continued
    assert after["epoch"] > before["epoch"] and after["global_step"] > before["global_step"]

    rows = [json.loads(line) for line in Path(train).read_text().splitlines()]
    for r in rows[:2]:
        r["text"] = "one two three"  # brings 'h' (and 'r') the base vocabulary ("one two") lacks
    new_train = tmp_path / "new.jsonl"
    new_train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_zoo("train", *FAST, f"task.data.train_manifest={new_train}", f"task.data.val_manifest={val}",
                   "task.data.chars=null", f"task.module.init_from={last}", f"+task.data.base_vocab_from={last}",
                   env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:]
    tuned = torch.load(next((run_dirs(tmp_path, "speech/ctc")[-1] / "checkpoints").glob("best*.ckpt")),
                       map_location="cpu", weights_only=True)
    old = after["hyper_parameters"]["vocab"]
    vocab = tuned["hyper_parameters"]["vocab"]
    assert vocab[: len(old)] == old and {"h", "r"} <= set(vocab[len(old):])


def test_skipped_audio_is_a_console_warning_and_all_bad_is_an_error(run_zoo, tmp_path):
    """Unreadable audio is reported where the user looks: 'skipped 1 of 9 utterances' is a WARNING on the console
    (not only in the run's log file) naming the count and the bad file, and a manifest with no usable audio stops
    with one error line."""
    train, val = _corpus(tmp_path)
    with open(train, "a") as f:
        f.write(json.dumps({"audio_filepath": "gone.wav", "text": "one"}) + "\n")
    proc = run_zoo("train", *FAST, f"task.data.train_manifest={train}", f"task.data.val_manifest={val}",
                   "trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "test_after_fit=false", env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:]
    warned = [line for line in proc.stdout.splitlines() if "skipped 1 of 9 utterances" in line]
    assert warned and "missing file" in warned[0] and "gone.wav" in warned[0] and "WARNING" in warned[0], \
        proc.stdout[-3000:]

    (tmp_path / "junk.wav").write_bytes(b"not audio")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"audio_filepath": p, "text": "one"}) + "\n" for p in ("gone.wav", "junk.wav")))
    proc = run_zoo("train", *FAST, f"task.data.train_manifest={bad}", f"task.data.val_manifest={val}", env=ENV)
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "no usable utterances" in errors[0], proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout


def test_resume_after_mid_epoch_sigterm(run_zoo, tmp_path):
    """SIGTERM after optimizer step 4 (batch 1 of 3 in the second epoch): exit 143, last.ckpt mid-epoch; then
    `ckpt_path=<run dir>` resumes in the same run dir and finishes the 2 requested epochs (6 steps)."""
    import csv

    train, val = _corpus(tmp_path)
    args = [*FAST, f"task.data.train_manifest={train}", f"task.data.val_manifest={val}", "task.data.batch_size=2",
            "trainer.max_epochs=2", "test_after_fit=false"]
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=4", env=ENV)
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    (run,) = run_dirs(tmp_path, "speech/ctc")
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4 and ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 1

    resumed = run_zoo("train", f"ckpt_path={run}", env=ENV)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "finished speech/ctc" in resumed.stdout and "`max_epochs=2` reached" in resumed.stdout
    # The resumed part continues the step count (CSVLogger rewrites metrics.csv on resume: only steps 5 and 6).
    steps = sorted({int(r["step"]) for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get("train/loss")})
    assert steps[-1] == 5 and steps[0] >= 4, steps  # (logged at step index 4 and 5, i.e. optimizer steps 5, 6)
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    # last.ckpt follows every evaluation, also one where val/cer did not improve (Lightning 2.6's save_last does not)
    assert ckpt["global_step"] == 6
