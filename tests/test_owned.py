"""One owner of removal (zoo/core/owned.py): the zoo deletes only what the running process created, and every call
site that removes something keeps a folder of the user's intact."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from zoo.core import owned
from zoo.errors import ZooError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _fresh_record():
    owned.forget()
    yield
    owned.forget()


def user_folder(folder: Path) -> dict[str, str]:
    """A folder of the user's: a note, a sub-folder with a photo, a file named as an export's own."""
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("precious\n")
    (folder / "sub" / "photo.png").write_bytes(os.urandom(64))
    (folder / "model.json").write_text("{}\n")
    return checksums(folder)


def checksums(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_that_existed_keeps_all_it_held_and_loses_what_the_process_added(tmp_path):
    before = user_folder(tmp_path / "mine")
    owned.make_dirs(tmp_path / "mine")
    (tmp_path / "mine" / ".hydra").mkdir()
    (tmp_path / "mine" / "run.log").write_text("new")
    assert owned.remove(tmp_path / "mine")
    assert checksums(tmp_path / "mine") == before and not (tmp_path / "mine" / ".hydra").exists()


def test_a_new_folder_goes_with_the_parents_it_made_and_nothing_else(tmp_path):
    (tmp_path / "outputs" / "other").mkdir(parents=True)
    run = owned.make_dirs(tmp_path / "outputs" / "task" / "name" / "run")
    (run / "cli.log").write_text("x")
    assert owned.owns(run / "cli.log") and not owned.owns(tmp_path / "outputs" / "other")
    owned.remove(run)
    assert not (tmp_path / "outputs" / "task").exists() and (tmp_path / "outputs" / "other").is_dir()


def test_what_the_process_did_not_make_is_never_removed(tmp_path):
    user_folder(tmp_path)
    assert not owned.remove(tmp_path / "notes.txt") and not owned.remove(tmp_path / "sub")
    assert (tmp_path / "notes.txt").is_file() and (tmp_path / "sub" / "photo.png").is_file()


def test_only_a_zoo_writers_temp_name_counts_as_partial(tmp_path):
    names = {".last.ckpt.k2j3_x.tmp": True, "config.yaml.4194999.tmp": True, "notes.tmp": False,
             "my.ckpt": False, "draft.tmp.txt": False}
    for name in names:
        (tmp_path / name).write_text("x")
    for name, partial in names.items():
        assert owned.remove_partial(tmp_path / name) is partial
        assert (tmp_path / name).exists() is not partial


def test_the_writers_temp_names_are_the_ones_the_owner_recognises(tmp_path):
    """AtomicCheckpointIO's and write_text_atomic's temp files must match `PARTIAL`, or a killed run's leftovers
    would stay forever; the test fails if either writer changes its naming."""
    from zoo.base import write_text_atomic

    fd, tmp = owned.temp_file(tmp_path, prefix=".last.ckpt.")
    os.close(fd)
    assert owned.is_partial(tmp)
    seen = []
    real_replace = os.replace
    try:
        os.replace = lambda a, b: (seen.append(Path(a)), real_replace(a, b))[1]  # type: ignore[assignment]
        write_text_atomic(tmp_path / "config.yaml", "a: 1\n")
    finally:
        os.replace = real_replace
    assert owned.is_partial(seen[0])


def test_an_export_replaces_exactly_the_files_it_listed(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    (out / "model.onnx").write_text("old")
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "vocab.txt").write_text("old")
    new = owned.temp_dir(tmp_path, prefix=".export.")
    (new / "model.onnx").write_text("new")
    owned.replace_listed(new, out, {"model.onnx", "tokenizer/vocab.txt"})
    assert (out / "model.onnx").read_text() == "new" and not (out / "tokenizer").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_an_export_folder_with_a_file_it_did_not_list_is_not_replaced(tmp_path):
    out = tmp_path / "export"
    before = user_folder(out)
    new = owned.temp_dir(tmp_path, prefix=".export.")
    with pytest.raises(FileExistsError):
        owned.replace_listed(new, out, {"model.json"})
    assert checksums(out) == before


# ------------------------------------------------------------------------------------------------ call sites
def test_runlock_discards_only_what_it_added_to_a_users_folder(tmp_path):
    from zoo.core import runlock

    mine = tmp_path / "mine"
    before = user_folder(mine)
    runlock.claim(mine, resuming=False)
    (mine / ".hydra").mkdir()
    (mine / ".hydra" / "config.yaml").write_text("x")
    runlock.discard_new_folders()
    runlock.release_all()
    assert checksums(mine) == before and sorted(p.name for p in mine.iterdir()) == ["model.json", "notes.txt", "sub"]


def test_a_stopped_test_removes_its_own_log_folder_only(tmp_path):
    run = tmp_path / "run"
    before = user_folder(run / "test")
    folder = owned.make_dirs(run / "test" / "2026-01-01_00-00-00")
    (folder / "events").write_text("partial")
    owned.remove(folder)
    assert checksums(run / "test") == before


def test_a_failed_checkpoint_write_leaves_no_temp_and_lightning_replaces_only_its_own(tmp_path):
    from zoo.core.checkpoint import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    folder = tmp_path / "checkpoints"
    before = user_folder(folder)
    (folder / "users.ckpt").write_bytes(b"the user's weights")
    with pytest.raises(AttributeError):
        io.save_checkpoint({"x": lambda: 0}, folder / "best.ckpt")  # a lambda does not pickle
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    io.save_checkpoint({"x": 1}, folder / "best.ckpt")
    io.remove_checkpoint(folder / "users.ckpt")  # not this process's: kept
    io.remove_checkpoint(folder / "best.ckpt")
    assert (folder / "users.ckpt").is_file() and not (folder / "best.ckpt").exists()
    assert {k: v for k, v in checksums(folder).items() if k != "users.ckpt"} == before


def test_a_stopped_corpus_synthesis_leaves_no_half_corpus(tmp_path, monkeypatch):
    import zoo.speech.synth as synth
    before = user_folder(tmp_path)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth, "_synth_split", stop)
    monkeypatch.setattr("zoo.speech.espeak.ESpeak.get", staticmethod(lambda: None))
    with pytest.raises(KeyboardInterrupt):
        synth.generate(tmp_path, num_train=2, num_val=1, num_test=1)
    assert checksums(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "notes.txt", "sub"]


def test_an_export_out_folder_is_replaced_only_when_it_holds_an_earlier_exports_files(tmp_path):
    from zoo.verbs.export_out import earlier_export, publish, staging_dir, write_manifest

    out = tmp_path / "out"
    out.mkdir()
    (out / "model.json").write_text("{}")  # any file named model.json made the folder replaceable
    (out / "notes.md").write_text("mine")
    with pytest.raises(ZooError, match="other files in it"):
        staging_dir(out)
    (out / "model.json").write_text(json.dumps({"task": "t", "format": "onnx", "files": ["model.json"]}))
    with pytest.raises(ZooError, match=re.escape("did not write (notes.md)")):
        staging_dir(out)
    (out / "notes.md").unlink()
    tmp = staging_dir(out)
    (tmp / "model.onnx").write_text("new")
    meta = write_manifest(tmp, {"task": "t", "format": "onnx"})
    assert meta["files"] == ["model.json", "model.onnx"]
    publish(tmp, out)
    assert earlier_export(out, set()) == {"model.json", "model.onnx"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_every_removal_in_the_code_goes_through_the_owner():
    """No rmtree/unlink/rmdir/os.remove outside zoo/core/owned.py in the zoo and the domains: a new call site would
    decide on its own what it may delete."""
    import ast

    removers = {"rmtree", "unlink", "rmdir", "removedirs"}
    found = []
    for package in ("zoo", "vision", "nlp", "rl", "speech", "gan", "hydra_plugins"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "zoo" / "core" / "owned.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    name, of = node.func.attr, node.func.value
                    if name in removers or name == "remove" and isinstance(of, ast.Name) and of.id == "os":
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not found, found
