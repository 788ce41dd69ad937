"""The drills of speech manifests whose audio is not audio: float wavs holding NaN or inf samples (harness.py holds the
properties every row keeps). Such a file is a bad file: skipped with the manifest's other bad files in one warning
that counts them, never trained on (one NaN sample turns every weight NaN), and a manifest of nothing else is one
line. A tiny random-weight Whisper on a generated corpus, seconds each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from harness import Drill, Step, play_row

SPEECH = ["experiment=speech_so762", "task.module.pretrained=false", "trainer=debug", "trainer.max_epochs=1",
          "trainer.enable_progress_bar=false", "+task.module.model.d_model=16", "+task.module.model.layers=1",
          "+task.module.model.heads=2", "+task.module.model.ffn=32", "task.module.model.rnn_head=8",
          "task.data.batch_size=2", "task.data.val_speakers=1", "task.data.train_manifest=train.jsonl",
          "task.data.test_manifest=test.jsonl", "hydra.run.dir=run", "logger=csv"]


def rows() -> list[Drill]:
    return [
        Drill("train-on-a-manifest-of-nan-audio",
              [Step(SPEECH, 2, r"train\.jsonl: no usable utterances \(\{'NaN or inf samples': 6\}\)")],
              setup=lambda w, a: corpus(w, nan_every=1), check=lambda w, c: no_metric(c[0]),
              promise="a manifest whose float wavs all hold NaN or inf samples is one line that counts them; "
                      "nothing is trained on them, no metric is reported"),
        Drill("train-skips-nan-audio-with-a-count",
              [Step(SPEECH, 0)], setup=lambda w, a: corpus(w, nan_every=3),
              check=lambda w, c: skipped_and_finite(c[0]),
              promise="a float wav with a NaN or inf sample is skipped with the other bad files, counted in the "
                      "manifest's one warning; test/wer and test/cer are finite"),
        Drill("rescore-option-of-the-wrong-type",
              [Step([*SPEECH, "task.module.rescore.ctc_weight=high"], 2,
                    r"task\.module\.rescore\.ctc_weight='high' is not a number")],
              setup=lambda w, a: corpus(w, nan_every=99), check=lambda w, c: no_metric(c[0]),
              promise="a rescoring weight that is not a number is one line naming the option, before any training"),
        Drill("rescore-names-no-file",
              [Step([*SPEECH, "+task.module.rescore.weights=/etc/passwd"], 2,
                    r"task\.module\.rescore: unknown keys \['weights'\]")],
              setup=lambda w, a: corpus(w, nan_every=99), check=lambda w, c: no_metric(c[0]),
              promise="the rescoring options hold no path (a checkpoint records them, and reading one opens no "
                      "file it names): a weights file is refused in one line"),
    ]


def corpus(where: Path, nan_every: int) -> None:
    """Three speakers of two float wavs each (train) and one (test); every nan_every-th training file holds a NaN
    (and one of them an inf)."""
    train, test = [], []
    for i in range(7):
        t = np.arange(4800) / 16000
        wave = (0.3 * np.sin(2 * np.pi * (300 + 50 * i) * t)).astype(np.float32)
        if i < 6 and i % nan_every == 0:
            wave[100] = np.inf if i == 3 else np.nan
        sf.write(where / f"{i}.wav", wave, 16000, subtype="FLOAT")
        row = {"audio_filepath": f"{i}.wav", "text": "one two" if i % 2 else "two", "speaker": f"s{i // 2}"}
        (train if i < 6 else test).append(row)
    (where / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (where / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))


def no_metric(console: str) -> None:
    assert "best checkpoint:" not in console and "test/wer" not in console, console[-1500:]


def skipped_and_finite(console: str) -> None:
    assert re.search(r"train\.jsonl: skipped 2 of 6 utterances: 2 NaN or inf samples", console), console[-2000:]
    found = dict(re.findall(r"^\s+(test/(?:wer|cer))\s+(\S+)$", console, re.M))
    assert set(found) == {"test/wer", "test/cer"} and all(np.isfinite(float(v)) for v in found.values()), found


@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill: Drill, assets, tmp_path):
    play_row(drill, assets, tmp_path)
