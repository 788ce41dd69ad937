"""`task.module.pretrained=` for PPO: a checkpoint with another action space (same observations) loads all but the
policy head, the report names what did not load, and bad values are one line. Module level, no training."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.kit.pretrained import PretrainedReport
from zoo.rl.module import PPO


def module(env_id: str, **kw) -> PPO:  # noqa: ANN003
    return PPO(env={"id": env_id, "num_envs": 1}, num_steps=16, num_minibatches=1, total_timesteps=16, **kw)


def save(m: PPO, path, task: str = "rl/ppo") -> str:  # noqa: ANN001
    ckpt = {"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams), "zoo": {"task": task}}
    m.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


def test_another_action_space_keeps_value_and_hidden_layers_and_starts_a_new_policy_head(tmp_path):
    src = module("MountainCar-v0")  # obs Box(2,), Discrete(3)
    path = save(src, tmp_path / "src.ckpt")
    m = module("MountainCarContinuous-v0", pretrained=path)  # obs Box(2,), Box(1,)
    a, b = src.agent.state_dict(), m.agent.state_dict()
    for name in ("critic.0.weight", "critic.2.weight", "critic.4.bias", "actor.0.weight", "actor.2.bias"):
        assert torch.equal(a[name], b[name]), name
    assert b["actor.4.weight"].shape == (1, 64) and "head.log_std" in b  # Box(1) head, not Discrete(3)'s (3, 64)
    report = m.pretrained_report
    assert sorted(report["reinit"]) == ["actor.4.bias", "actor.4.weight", "head.log_std"]
    assert "new policy head" in report["line"] and "actor.4.weight" in report["line"]
    ckpt: dict = {}
    m.on_save_checkpoint(ckpt)
    PretrainedReport().on_save_checkpoint(None, m, ckpt)  # what `zoo train` adds (configs/callbacks)
    assert ckpt["pretrained_report"]["source"] == path


def test_same_spaces_load_everything(tmp_path):
    src = module("CartPole-v1")
    m = module("CartPole-v1", pretrained=save(src, tmp_path / "a.ckpt"))
    assert all(torch.equal(v, m.agent.state_dict()[k]) for k, v in src.agent.state_dict().items())
    assert m.pretrained_report["reinit"] == [] and not m.pretrained_report["skipped_shape"]


def test_bad_values_are_one_line(tmp_path):
    src = module("CartPole-v1")
    path = save(src, tmp_path / "cp.ckpt")
    cases = [
        (str(tmp_path / "missing.ckpt"), "not found"),
        (save(src, tmp_path / "vision.ckpt", task="vision/resnet"), "is a vision/resnet checkpoint, not rl/ppo"),
        (path, "the spaces must match in observations"),  # Acrobot: 6 observations, CartPole 4
        ("auto", "no hub weights"),
    ]
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"garbage")
    cases.append((str(corrupt), "not a zoo checkpoint"))
    other = tmp_path / "other.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, other)
    cases.append((str(other), "incompatible weights"))
    for value, message in cases:
        env = "Acrobot-v1" if value == path else "CartPole-v1"
        with pytest.raises(ZooError, match=message) as e:
            module(env, pretrained=value)
        assert "\n" not in str(e.value)
