"""A resumed run owns its best checkpoints wherever its folder now is (zoo/core/relocate.py); an evaluating verb
applies or refuses every override, never drops one (zoo.core.recorded.check_applied); images at their real values
whatever their bit depth (zoo.kit.images.convert)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from zoo.core import owned
from zoo.core.relocate import relocate
from zoo.errors import ZooError


def _state(folder, scores: dict[str, float]) -> dict:
    """What ModelCheckpoint(mode=max, save_top_k=1).state_dict() recorded in `folder`."""
    best = max(scores, key=scores.get)
    return {"monitor": "val/acc", "best_model_score": torch.tensor(scores[best]),
            "best_model_path": str(folder / best), "current_score": None, "dirpath": str(folder),
            "best_k_models": {str(folder / k): torch.tensor(v) for k, v in scores.items()},
            "kth_best_model_path": str(folder / best), "kth_value": torch.tensor(scores[best]),
            "last_model_path": str(folder / "last.ckpt")}


def test_a_moved_runs_checkpoint_state_follows_it_and_keeps_its_best_score(tmp_path):
    old, new = tmp_path / "old" / "checkpoints", tmp_path / "moved" / "checkpoints"
    new.mkdir(parents=True)
    for name in ("best-epoch011.ckpt", "last.ckpt"):
        (new / name).write_bytes(b"x")
    state = _state(old, {"best-epoch011.ckpt": 997.52})
    assert relocate(state, str(new), "max") == str(old)
    cb = ModelCheckpoint(dirpath=str(new), monitor="val/acc", mode="max", save_top_k=1)
    with _no_dirpath_warning():
        cb.load_state_dict(state)
    assert cb.best_model_path == str(new / "best-epoch011.ckpt") and float(cb.best_model_score) == pytest.approx(997.52)
    # the first evaluation after the resume (995.83) is worse: it does not become the best
    one_process = SimpleNamespace(strategy=SimpleNamespace(reduce_boolean_decision=lambda decision: decision))
    assert not cb.check_monitor_top_k(one_process, torch.tensor(995.83))
    assert cb.check_monitor_top_k(one_process, torch.tensor(998.0))
    assert owned.owns(new / "best-epoch011.ckpt")  # the run's own: top-k may replace it by a better one


def test_a_best_checkpoint_whose_file_is_gone_no_longer_counts(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    state = _state(folder, {"best-epoch003.ckpt": 0.9})
    assert relocate(state, str(folder), "max") is None
    assert state["best_k_models"] == {} and state["best_model_path"] == "" and state["best_model_score"] is None


class _no_dirpath_warning:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings(record=True)
        self.seen = self._w.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._w.__exit__(*exc)
        assert not [w for w in self.seen if "dirpath has changed" in str(w.message)]


# ------------------------------------------------------------------------------------------- overrides
def _rl_checkpoint(preset: str) -> dict:
    from zoo.base import plain
    from zoo.testing import compose

    cfg = plain(compose(["task=rl/ppo", f"experiment={preset}"]))
    hp = {k: v for k, v in cfg["task"]["module"].items() if k not in ("_target_", "optimizer", "scheduler")}
    return {"zoo": {"overrides": ["task=rl/ppo", f"experiment={preset}"], "config": cfg}, "hyper_parameters": hp}


@pytest.mark.parametrize("override", ["task.env.id=HalfCheetah-v5", "task.env.normalize_obs=false",
                                      "task.module.gamma=0.5"])
def test_an_override_the_rebuilt_model_would_not_see_is_refused(override):
    """`zoo test ckpt_path=<Hopper> task.env.id=HalfCheetah-v5` exited 0 with the Hopper numbers."""
    from zoo.core.recorded import checkpoint_overrides

    ckpt = _rl_checkpoint("rl_hopper")
    with pytest.raises(ZooError, match="would be dropped"):
        checkpoint_overrides(ckpt, "rl/ppo", [override], ["run_dir=/tmp/x"])


def test_an_override_that_matches_the_model_or_reaches_the_evaluation_passes():
    from zoo.core.recorded import checkpoint_overrides

    ckpt = _rl_checkpoint("rl_hopper")
    for ok in (["task.env.id=Hopper-v5"], ["seed=3"], ["trainer.num_threads=1"], []):
        checkpoint_overrides(ckpt, "rl/ppo", ok, ["run_dir=/tmp/x"])


# ------------------------------------------------------------------------------------------------ images
def test_16_bit_greyscale_is_read_at_its_real_values(tmp_path):
    import numpy as np
    from PIL import Image

    from zoo.kit.images import open_image

    ramp = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "g16.png")
    Image.fromarray(ramp).save(tmp_path / "g16.tif")
    Image.fromarray((ramp // 257).astype(np.uint8)).save(tmp_path / "g8.png")
    want = np.asarray(open_image(tmp_path / "g8.png", "RGB"), dtype=float)
    for name in ("g16.png", "g16.tif"):
        got = np.asarray(open_image(tmp_path / name, "RGB"), dtype=float)
        assert np.abs(got - want).max() <= 1, name  # PIL alone: mean 254.5, all but the darkest pixels white
    noise = np.random.default_rng(0).integers(0, 65536, (8, 8)).astype(np.uint16)
    Image.fromarray(noise).save(tmp_path / "n16.png")
    assert np.asarray(open_image(tmp_path / "n16.png", "L")).std() > 50  # two different photos stay different
