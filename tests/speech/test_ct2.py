"""speech/ct2.py: CTranslate2 model.bin read back from tiny synthetic files; bad files one line."""

from __future__ import annotations

import re
import struct

import pytest
import torch

from zoo.errors import ZooError
from zoo.speech.ct2 import read_ct2, write_ct2


def test_round_trip_header_variables_aliases_and_half_to_float(tmp_path):
    w = torch.randn(6, 4)
    path = write_ct2(tmp_path / "model.bin", "WhisperSpec",
                     {"encoder/conv1/weight": w, "encoder/num_heads": torch.tensor(2, dtype=torch.int16),
                      "decoder/embeddings/weight": torch.arange(12.0).reshape(3, 4)},
                     aliases={"decoder/projection/weight": "decoder/embeddings/weight"})
    m = read_ct2(path)
    assert (m.version, m.spec, m.revision) == (6, "WhisperSpec", 3)
    assert list(m.variables) == ["encoder/conv1/weight", "encoder/num_heads", "decoder/embeddings/weight"]
    got = m.variables["encoder/conv1/weight"]
    assert got.dtype == torch.float32 and got.shape == (6, 4)
    assert torch.equal(got, w.half().float())  # stored as float16, read as float32
    assert int(m.variables["encoder/num_heads"]) == 2
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert torch.equal(m.get("decoder/projection/weight"), torch.arange(12.0).reshape(3, 4))


def test_float32_kept(tmp_path):
    w = torch.randn(3, 5)
    m = read_ct2(write_ct2(tmp_path / "m.bin", "WhisperSpec", {"x": w}, half=False))
    assert torch.equal(m.variables["x"], w)


@pytest.mark.parametrize("content,words", [
    (b"PK\x03\x04 a zip, not a model", "not a CTranslate2 model.bin (format version"),
    (b"", "ends early"),
    (struct.pack("<I", 6) + struct.pack("<H", 12) + b"Whisper", "ends early"),
])
def test_not_a_ct2_file_is_one_line(tmp_path, content, words):
    path = tmp_path / "model.bin"
    path.write_bytes(content)
    with pytest.raises(ZooError, match=re.escape(words)) as e:
        read_ct2(path)
    assert "\n" not in str(e.value)


def test_damaged_byte_count_and_trailing_bytes(tmp_path):
    good = write_ct2(tmp_path / "a.bin", "WhisperSpec", {"x": torch.ones(2, 2)}).read_bytes()
    (tmp_path / "b.bin").write_bytes(good + b"junk")
    with pytest.raises(ZooError, match="bytes after the last alias"):
        read_ct2(tmp_path / "b.bin")
    # the byte count of x (uint32 after rank, dims and dtype) says 6 instead of 8
    at = good.index(b"x\0") + 2 + 1 + 8 + 1
    (tmp_path / "c.bin").write_bytes(good[:at] + struct.pack("<I", 6) + good[at + 4:])
    with pytest.raises(ZooError, match="damaged"):
        read_ct2(tmp_path / "c.bin")
