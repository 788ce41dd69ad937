"""Fixtures shared by the speech tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf


@pytest.fixture()
def tone_manifest(tmp_path: Path) -> list[str]:
    """Tone bursts at 8 kHz standing in for speech ('one' 440 Hz, 'two' 880 Hz; the models read 16 kHz), one 16 kHz
    file (wide.wav, not in the manifest) and train.jsonl; returns the overrides that train on them."""
    rows = []
    for i in range(8):
        t = np.arange(int(8000 * (0.3 + 0.05 * i))) / 8000
        sf.write(tmp_path / f"{i}.wav", (0.5 * np.sin(2 * np.pi * (440 + 440 * (i % 2)) * t)).astype(np.float32), 8000)
        rows.append({"audio_filepath": f"{i}.wav", "text": ["one", "two"][i % 2]})
    t = np.arange(8000) / 16000
    sf.write(tmp_path / "wide.wav", (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    manifest = tmp_path / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [f"task.data.train_manifest={manifest}", f"task.data.val_manifest={manifest}"]
