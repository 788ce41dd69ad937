"""Failures that printed tracebacks, each one line now: a full disk while saving, a bad value in any position of a
sweep, a broken config tree from ZOO_CONFIG_PATH, a weight average a task cannot take."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from zoo.errors import ZooError


# ---------------------------------------------------------------------------------------------- disk full
def test_a_full_disk_while_saving_is_one_line_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    """exit 1 with `OSError: [Errno 28]` and torch's `enforce fail at inline_container.cc` tracebacks."""
    from zoo.core.checkpoint import AtomicCheckpointIO

    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(4)}}, last)
    good = last.read_bytes()
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):  # noqa: ANN001 - as torch.save, on a disk that fills after 1 KiB
        f.write(b"\0" * 1024)
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1024 vs 0") from None

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(ZooError) as e:
        io.save_checkpoint({"state_dict": {"w": torch.zeros(2**20)}}, last)  # 4 MiB of weights
    monkeypatch.setattr(torch, "save", real_save)
    line = str(e.value)
    assert line.startswith(f"disk full while saving {last}: it needs about 4 MiB and ") and "\n" not in line
    assert f"the last good checkpoint {last} is kept (the partial file was removed)" in line
    assert f"continue with `python -m zoo train ckpt_path={run}`" in line
    assert last.read_bytes() == good and sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]


# ------------------------------------------------------------------------------------------- sweep values
@pytest.mark.parametrize("sweep, expected", [
    ("task.module.optimizer.lr=1e-3,-1", "task.module.optimizer.lr=-1 (one of the values to try): "
                                         "task.module.optimizer: Invalid learning rate: -1"),
    ("task.module.optimizer.lr=1e-3,3e-4,-1", "task.module.optimizer.lr=-1 (one of the values to try)"),
    ("task.data.batch_size=8,0", "task.data.batch_size=0 (one of the values to try): task.data.batch_size=0 must"),
])
def test_every_value_of_a_sweep_is_checked_in_any_position(sweep, expected):
    """`-m lr=1e-3,-1` trained trial 0 and died in trial 1 with a ValueError traceback, leaving folder 1/."""
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError) as e:
        check_overrides(["trainer=cpu", sweep])
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------- trainer.ema_decay
def test_the_weight_average_refusal_speaks_of_the_task_at_hand():
    """PPO's refusal pointed at the GAN's key, and it came after Lightning's 'GPU available' lines."""
    from zoo.core.build import build_data_and_module
    from zoo.testing import compose

    with pytest.raises(ZooError) as e:
        build_data_and_module(compose(["experiment=rl_cartpole", "trainer.ema_decay=0.9"]))
    assert "PPO steps its own optimisers" in str(e.value) and str(e.value).endswith("trainer.ema_decay=null")
    with pytest.raises(ZooError) as e:
        build_data_and_module(compose(["task=gan/dcgan", "trainer.ema_decay=0.9", "task.module.arch=dcgan_small"]))
    assert str(e.value).endswith("(this task keeps its own average: task.module.ema_decay)")


@pytest.mark.slow
def test_a_refused_weight_average_comes_before_any_trainer_line(run_zoo, tmp_path):
    proc = run_zoo("train", "experiment=rl_cartpole", "trainer.ema_decay=0.9")
    assert proc.returncode == 2 and proc.stdout.strip().startswith("zoo: error: trainer.ema_decay: PPO steps"), \
        proc.stdout[-3000:]
    assert "GPU available" not in proc.stdout and "Traceback" not in proc.stdout
    assert not (tmp_path / "outputs" / "rl").exists()  # no run folder left


# --------------------------------------------------------------------------------- a config tree of one's own
TOY = Path(__file__).parent / "toy_task"


def _tree(tmp_path: Path, monkeypatch, **tasks: str) -> Path:
    """A ZOO_CONFIG_PATH tree holding toy/<name>.yaml for each task, `edit` applied to the toy task's own file."""
    root = tmp_path / "configs"
    (root / "task" / "toy").mkdir(parents=True)
    blobs = (TOY / "configs" / "task" / "toy" / "blobs.yaml").read_text()
    for name, (old, new) in tasks.items():
        assert old in blobs
        text = blobs.replace("name: toy/blobs", f"name: toy/{name}").replace(old, new)
        (root / "task" / "toy" / f"{name}.yaml").write_text(text)
    monkeypatch.setenv("ZOO_CONFIG_PATH", str(root))
    monkeypatch.syspath_prepend(str(TOY))
    return root


def test_broken_yaml_names_its_file_and_line_and_list_marks_it(tmp_path, monkeypatch, capsys):
    """`bad config or override (while parsing a flow mapping)` named no file; `zoo list` showed the task as fine."""
    from zoo.core.config import check_overrides, register_resolvers
    from zoo.verbs import listing

    root = _tree(tmp_path, monkeypatch, broken=("  monitor: val/acc\n", "  monitor: {a: 1\n  mode2: max\n"))
    register_resolvers()
    with pytest.raises(ZooError) as e:
        check_overrides(["task=toy/broken"])
    where = root / "task" / "toy" / "broken.yaml"
    assert str(e.value).startswith(f"config file {where}:") and "while parsing a flow mapping that starts at line" \
        in str(e.value) and "\n" not in str(e.value)
    listing.main([])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "toy/broken" in line]
    assert f"BROKEN: {where}:" in row
    with pytest.raises(ZooError, match=f"config file {where}:"):
        listing.main(["toy/broken"])


def test_a_target_that_names_a_missing_class_is_one_line_naming_what_exists(tmp_path, monkeypatch):
    from zoo.core.config import check_overrides, register_resolvers

    _tree(tmp_path, monkeypatch, typo=("toy.module.TinyClassifier", "toy.module.TinyClasifier"),
          nomodule=("toy.module.TinyClassifier", "toy.modle.TinyClassifier"))
    register_resolvers()
    with pytest.raises(ZooError) as e:
        check_overrides(["task=toy/typo"])
    assert str(e.value) == ("task.module._target_=toy.module.TinyClasifier: toy.module has no 'TinyClasifier'; "
                            "did you mean TinyClassifier?")
    with pytest.raises(ZooError) as e:
        check_overrides(["task=toy/nomodule"])
    assert "task.module._target_=toy.modle.TinyClassifier: module toy.modle cannot be imported" in str(e.value)


def test_a_config_path_folder_that_does_not_exist_is_said(tmp_path, monkeypatch, capsys):
    from zoo.core.config import config_dirs

    monkeypatch.setenv("ZOO_CONFIG_PATH", f"{tmp_path / 'nowhere'}")
    config_dirs()
    assert f"zoo: warning: ZOO_CONFIG_PATH names {tmp_path / 'nowhere'}, which is not a folder" in \
        capsys.readouterr().err
