"""experiment=speech_so762 through the verbs on a tiny generated corpus of four speakers (a random-weight Whisper of
width 16, no package): validation carved by speaker, test/wer + test/cer + per-group WER in the summary, the
per-speaker file, test, predict on a folder (NaN audio: its own error line) and on a manifest (beam + an n-gram LM
built from text), ONNX export with parity, reproduce, SIGTERM mid-epoch and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from zoo.testing import SIGTERM_AT, TINY, run_dirs

pytestmark = pytest.mark.slow
ENV = {"OMP_NUM_THREADS": "1"}
SO762 = [*TINY, "experiment=speech_so762", "task.module.pretrained=false", "logger=csv",
         "+task.module.model.d_model=16", "+task.module.model.layers=1",
         "+task.module.model.heads=2", "+task.module.model.ffn=32", "task.module.model.rnn_head=8",
         "task.data.batch_size=2",
         "task.data.val_speakers=1"]


def _corpus(root: Path) -> list[str]:
    """Four speakers (two children, two adults), three sentences each; speakers.tsv; a test manifest of one more
    speaker. Returns the overrides that train on it."""
    words = {"one": 440, "two": 880}
    rows, test = [], []
    for n, speaker in enumerate(["k1", "k2", "a1", "a2", "t1"]):
        for i, text in enumerate(["one two", "two one", "one one"]):
            t = np.arange(int(16000 * 0.4)) / 16000
            wave = np.concatenate([0.4 * np.sin(2 * np.pi * words[w] * (1 + 0.05 * n) * t) for w in text.split()])
            sf.write(root / f"{speaker}_{i}.wav", wave.astype(np.float32), 16000)
            (test if speaker == "t1" else rows).append({"audio_filepath": f"{speaker}_{i}.wav", "text": text,
                                                        "speaker": speaker})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    (root / "speakers.tsv").write_text("speaker\tage\tgender\nk1\t7\tm\nk2\t9\tf\na1\t25\tm\na2\t30\tf\nt1\t8\tm\n")
    (root / "lm.txt").write_text("one two\ntwo one\none one\n")
    return [f"task.data.train_manifest={root / 'train.jsonl'}", f"task.data.test_manifest={root / 'test.jsonl'}",
            f"task.data.speakers={root / 'speakers.tsv'}"]


def test_so762_preset_through_the_verbs(run_zoo, tmp_path):
    data = _corpus(tmp_path)
    args = [*SO762, *data, "trainer.max_epochs=2", "task.module.freeze_encoder_epochs=1"]
    trained = run_zoo("train", *args, check=True, env=ENV)
    for metric in ("test/wer", "test/cer", "test/wer_children"):
        assert metric in trained.stdout
    (run,) = run_dirs(tmp_path, "speech/ctc")
    val = (run / "val_speakers.txt").read_text().split()
    assert len(val) == 1 and val[0] in {"k1", "k2", "a1", "a2"}
    table = (run / "test_speakers.tsv").read_text().splitlines()
    assert table[0].split("\t")[:2] == ["speaker", "group"] and table[1].startswith("t1\tchildren\t3\t")
    last = run / "checkpoints" / "last.ckpt"
    assert "test/wer" in run_zoo("test", f"ckpt_path={last}", check=True, env=ENV).stdout

    bad = np.zeros(1600, np.float32)
    bad[5] = np.nan
    sf.write(tmp_path / "nan.wav", bad, 16000, subtype="FLOAT")
    pred = run_zoo("predict", f"ckpt_path={last}", f"input={tmp_path}", check=True, env=ENV).stdout
    rows = {Path(r["file"]).name: r for r in map(json.loads, (x for x in pred.splitlines() if x.startswith("{")))}
    assert "NaN or inf" in rows["nan.wav"]["error"] and isinstance(rows["t1_0.wav"]["text"], str)
    alone = run_zoo("predict", f"ckpt_path={last}", f"input={tmp_path / 'nan.wav'}", env=ENV)
    assert alone.returncode == 2 and alone.stdout.count("zoo: error:") == 1 and "NaN or inf" in alone.stdout
    pred = run_zoo("predict", f"ckpt_path={last}", f"input={tmp_path / 'test.jsonl'}", "predict.decoder=beam",
                   "predict.beam_size=4", f"predict.lm_text={tmp_path / 'lm.txt'}", "predict.lm_order=2",
                   "predict.rescore=false", check=True, env=ENV).stdout
    texts = [json.loads(x)["text"] for x in pred.splitlines() if x.startswith("{")]
    # the LM's words only: without the preset's rescoring, which may take tiny.en's own transcript of these tones
    assert len(texts) == 3 and all(set(t.split()) <= {"one", "two"} for t in texts)

    out = tmp_path / "onnx"
    run_zoo("export", f"ckpt_path={last}", f"export.out={out}", "export.samples=4", check=True, env=ENV)
    assert json.loads((out / "model.json").read_text())["parity"]["fp32"]["ok"]
    again = run_zoo("reproduce", str(run), "reproduce.tolerance=1.0", env=ENV)
    assert again.returncode == 0, again.stdout[-3000:]

    # SIGTERM mid-way through the second (unfrozen) epoch, then resume: the test's own callback is recorded with the
    # run, so the resume trusts it explicitly
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=4", "hydra.run.dir=stopped", env=ENV)
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    assert torch.load(tmp_path / "stopped" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    resumed = run_zoo("train", f"ckpt_path={tmp_path / 'stopped'}", "trust_artifact=true", env=ENV)
    assert resumed.returncode == 0 and "test/wer" in resumed.stdout, resumed.stdout[-3000:]
