"""Tracebacks where one line was due: seeds out of numpy's range, deleted keys the zoo needs, run folders with an
empty or too long name, the first checkpoint on a full disk, a legacy-format checkpoint, SIGHUP."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest
import torch

from zoo.errors import ZooError


def check(overrides: list[str]) -> None:
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    check_overrides(["trainer=cpu", *overrides])


@pytest.mark.parametrize("seed", ["-1", "99999999999", "4294967296"])
def test_a_seed_outside_numpys_range_is_one_line(seed):
    with pytest.raises(ZooError, match=rf"seed={seed} must be a whole number from 0 to 4294967295"):
        check([f"seed={seed}"])
    check(["seed=4294967295"])


@pytest.mark.parametrize("key, line", [("~task", "every run reads it"), ("~seed", "every run reads it"),
                                       ("~task.monitor", "callbacks.model_checkpoint.monitor reads it")])
def test_deleting_a_key_the_zoo_needs_is_one_line(key, line):
    with pytest.raises(ZooError, match=rf"^{key} deletes a key the zoo needs \({line}\)"):
        check([key])
    check(["~callbacks.progress_bar"])  # a key nothing reads may go


def test_an_empty_run_dir_is_one_line(tmp_path):
    from zoo.core.config import check_output_dir

    cfg = {"hydra": {"run": {"dir": ""}}}
    with pytest.raises(ZooError, match="hydra.run.dir is empty, which puts the run's files into the current folder"):
        check_output_dir(__import__("omegaconf").OmegaConf.create(cfg), False)


def test_a_run_dir_name_over_255_bytes_is_one_line(tmp_path):
    from zoo.core.naming import check_writable

    with pytest.raises(ZooError, match="is 300 bytes, over the 255 a file name may have; fix it"):
        check_writable(tmp_path / ("x" * 300) / "run", "the run folder", "fix it")
    check_writable(tmp_path / ("x" * 255), "the run folder", "fix it")


def test_a_full_disk_at_the_first_checkpoint_is_one_line(tmp_path, monkeypatch):
    """The first checkpoint of a run: removing its partial file takes back the checkpoints folder it was alone in,
    and the message itself then raised FileNotFoundError on that folder."""
    from zoo.core.checkpoint import AtomicCheckpointIO

    def full_disk(obj, f, *args, **kwargs):  # noqa: ANN001 - as torch.save on a disk that fills after 1 KiB
        f.write(b"\0" * 1024)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    first = tmp_path / "run" / "checkpoints" / "best.ckpt"
    with pytest.raises(ZooError, match="no earlier checkpoint of this run exists .*then start the run again"):
        AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.zeros(8)}}, first)
    assert not first.parent.exists()


def test_a_legacy_format_checkpoint_loads(tmp_path):
    from zoo.core.checkpoint import load_checkpoint

    ckpt = {"state_dict": {"w": torch.ones(3)}, "zoo": {"task": "toy/blobs"}}
    torch.save(ckpt, tmp_path / "old.ckpt", _use_new_zipfile_serialization=False)
    assert torch.equal(load_checkpoint(tmp_path / "old.ckpt")["state_dict"]["w"], torch.ones(3))
    (tmp_path / "junk.ckpt").write_bytes(b"\x80\x02not torch at all")
    with pytest.raises(ZooError, match="not a PyTorch file at all"):
        load_checkpoint(tmp_path / "junk.ckpt")


SIGHUP_CHILD = """
import os, signal, sys, time
from zoo.core import stops
stops.install()
try:
    os.kill(os.getpid(), signal.SIGHUP)
    time.sleep(5)
except stops.Stopped:
    sys.exit(43)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_sighup_is_a_stop_like_sigterm():
    """A closed terminal ended a run on the spot (exit 129): no last.ckpt, a partial temp file left."""
    done = subprocess.run([sys.executable, "-c", SIGHUP_CHILD], timeout=60)
    assert done.returncode == 43
    # under nohup (SIGHUP ignored) it stays ignored: the run goes on after the terminal closes, as asked
    child = "import signal; from zoo.core import stops; stops.install(); " \
            "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)"
    done = subprocess.run(["nohup", sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stdout + done.stderr


def test_list_with_an_extra_word_is_one_line():
    from zoo.verbs.listing import main

    with pytest.raises(ZooError, match="at most one task, not vision/resnet extra"):
        main(["vision/resnet", "extra"])
