"""Environments, rollouts and the PPO module's checks, without the CLI (fast)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.rl.envs import check_env_id, space_spec
from zoo.rl.evaluate import run_episodes
from zoo.rl.module import ENV_DEFAULTS, PPO


class MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])


if "ZooTestMultiDiscrete-v0" not in gym.registry:
    gym.register("ZooTestMultiDiscrete-v0", entry_point=MultiDiscreteEnv)


def module(**kw) -> PPO:  # noqa: ANN003
    env = kw.pop("env", {})
    return PPO(env={"num_envs": 2, **env}, num_steps=16, num_minibatches=2, total_timesteps=64, **kw)


def test_unknown_env_id_is_one_line_with_suggestion() -> None:
    with pytest.raises(ZooError, match=r"unknown gymnasium environment 'CartPole-v9'.*CartPole-v1"):
        check_env_id("CartPole-v9")


def test_unsupported_action_space_names_the_supported_ones() -> None:
    with pytest.raises(ZooError, match="MultiDiscrete.*supports Discrete and Box"):
        module(env={"id": "ZooTestMultiDiscrete-v0"})
    with pytest.raises(ZooError, match="observation space"):
        space_spec(gym.make("Blackjack-v1"))


def test_bad_hyperparameters_fail_early() -> None:
    with pytest.raises(ZooError, match=r"2 \* 16 = 32 does not split into 3"):
        PPO(env={"num_envs": 2}, num_steps=16, num_minibatches=3)
    with pytest.raises(ZooError, match="unknown task.env keys"):
        PPO(env={"num_env": 2})
    with pytest.raises(ZooError, match="less than one rollout"):
        PPO(env={"num_envs": 4}, num_steps=128, total_timesteps=100)
    with pytest.raises(ZooError, match="unknown agent arch"):
        module(arch="transformer")


def test_rollout_shapes_episode_stats_and_truncation_bootstrap() -> None:
    torch.manual_seed(0)
    m = module(env={"kwargs": {"max_episode_steps": 5}})
    m.collector.start(seed=0)
    b = m.collector.collect(m.agent, 16)
    assert b.obs.shape == (16, 2, 4) and b.actions.shape == (16, 2) and b.rewards.shape == (16, 2)
    assert b.actions.dtype == torch.long and b.next_value.shape == (2,)
    # Every episode is cut at 5 steps: stats report them, and the truncated steps carry r + gamma * V(final obs).
    assert b.episode_lengths and max(b.episode_lengths) <= 5
    truncated_steps = b.dones[1:] & (b.rewards[:-1] != 1.0)
    assert truncated_steps.any()
    m.collector.close()


def test_normalisation_statistics_round_trip_through_checkpoint() -> None:
    m = module(env={"id": "Pendulum-v1", "normalize_obs": True, "normalize_reward": True})
    m.collector.start(seed=0)
    m.collector.collect(m.agent, 16)
    m.collector.close()
    ckpt: dict = {}
    m.on_save_checkpoint(ckpt)
    fresh = module(env={"id": "Pendulum-v1", "normalize_obs": True, "normalize_reward": True})
    assert not torch.equal(fresh.collector.obs_rms.mean, m.collector.obs_rms.mean)
    fresh.on_load_checkpoint(ckpt)
    for a, b in ((fresh.collector.obs_rms, m.collector.obs_rms), (fresh.collector.reward_scaler.rms,
                                                                    m.collector.reward_scaler.rms)):
        assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var) and torch.equal(a.count, b.count)
    # Box actions: the env gets clipped actions, the stored sample stays unclipped.
    assert np.all(np.abs(m.collector.env_action(torch.full((1, 1), 9.0))) <= 2.0)


def test_checkpoint_from_another_environment_is_refused() -> None:
    ckpt: dict = {}
    module().on_save_checkpoint(ckpt)
    with pytest.raises(ZooError, match=r"checkpoint is for CartPole-v1.*this run is for Acrobot-v1.*task.env.id"):
        module(env={"id": "Acrobot-v1"}).on_load_checkpoint(ckpt)


def test_deterministic_evaluation_is_reproducible_and_counts_episodes() -> None:
    m = module()
    policy = m.collector.policy(m.agent)
    r1, l1 = run_episodes(policy, "CartPole-v1", 5, seed=3, max_parallel=2)
    r2, _ = run_episodes(policy, "CartPole-v1", 5, seed=3, max_parallel=2)
    assert len(r1) == 5 and np.array_equal(r1, r2) and np.array_equal(r1, l1)  # CartPole: return == length


def test_env_defaults_are_documented_in_the_task_config() -> None:
    from omegaconf import OmegaConf

    from zoo.core.config import CONFIG_DIR

    cfg = OmegaConf.load(CONFIG_DIR / "task" / "rl" / "ppo.yaml")
    assert set(cfg.task.env) == set(ENV_DEFAULTS)


def test_atari_preset_frames_and_cnn_rollout() -> None:
    pytest.importorskip("ale_py")
    m = PPO(env={"id": "ALE/Breakout-v5", "num_envs": 1, "reward_sign": True}, arch="nature_cnn", num_steps=8,
            num_minibatches=1, total_timesteps=8)
    assert m.spec["obs_shape"] == [4, 84, 84] and m.spec["obs_dtype"] == "uint8"
    m.collector.start(seed=0)
    b = m.collector.collect(m.agent, 8)
    m.collector.close()
    assert b.obs.dtype == torch.uint8 and b.obs.shape == (8, 1, 4, 84, 84)  # frames stay uint8 in the buffer
    assert set(b.rewards.unique().tolist()) <= {-1.0, 0.0, 1.0}
    logp, _, _ = m.agent.evaluate(b.obs[:, 0], b.actions[:, 0])
    assert torch.allclose(logp, b.logp[:, 0], atol=1e-5)


def test_pretrained_loads_weights_and_statistics_and_checks_spaces(tmp_path) -> None:  # noqa: ANN001
    src = module(env={"normalize_obs": True})
    src.collector.start(seed=0)
    src.collector.collect(src.agent, 16)
    src.collector.close()
    ckpt = {"state_dict": src.state_dict()}
    src.on_save_checkpoint(ckpt)
    path = tmp_path / "src.ckpt"
    torch.save(ckpt, path)
    m = module(env={"normalize_obs": True}, pretrained=str(path))
    assert all(torch.equal(a, b) for a, b in zip(m.agent.state_dict().values(), src.agent.state_dict().values()))
    assert torch.equal(m.collector.obs_rms.mean, src.collector.obs_rms.mean)
    with pytest.raises(ZooError, match="pretrained=.*CartPole-v1.*the spaces must match"):
        module(env={"id": "Acrobot-v1"}, pretrained=str(path))


def test_training_a_module_without_optimizer_is_the_shared_error() -> None:
    from zoo.errors import NoOptimizerError

    with pytest.raises(NoOptimizerError, match="PPO was built without an optimizer"):
        module().configure_optimizers()


def test_record_episode_renders_every_nth_step() -> None:
    from zoo.rl.evaluate import record_episode

    def left(obs: np.ndarray) -> np.ndarray:  # pushing left ends CartPole in ~10 steps
        return np.zeros(len(obs), dtype=np.int64)

    full, r_full = record_episode(left, "CartPole-v1", seed=3)
    half, r_half = record_episode(left, "CartPole-v1", seed=3, every=2)
    assert full.shape[1:] == (400, 600, 3) and full.dtype == np.uint8
    assert r_half == r_full == len(full) - 1  # same episode: reward 1 per step, one frame per step plus the first
    assert len(half) == 1 + int(r_full) // 2 and np.array_equal(half[1], full[2])
    capped, _ = record_episode(left, "CartPole-v1", seed=3, max_frames=3, every=2)
    assert len(capped) == 3


def test_bf16_mixed_trains_with_the_fused_adam_of_the_presets() -> None:
    """Lightning's AMP refuses to clip a fused optimizer's gradients: under bf16-mixed the module asks for the
    per-tensor kernels instead (found by `zoo bench bench.precision=[32-true,bf16-mixed]`)."""
    import functools

    import lightning.pytorch as pl

    m = module(optimizer=functools.partial(torch.optim.Adam, lr=1e-3, fused=True), max_grad_norm=0.5)
    trainer = pl.Trainer(accelerator="cpu", precision="bf16-mixed", max_steps=4, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0)
    trainer.fit(m)
    assert trainer.global_step >= 4
    assert m.optimizers().optimizer.defaults["fused"] is False


class ValueIsObsSum(torch.nn.Module):
    """A stand-in agent: action 0, value = the sum of the (normalised) observation, so a bootstrap shows which
    statistics normalised the final observation."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.zeros(obs.shape[0], 1), torch.zeros(obs.shape[0]), self.value(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.double().sum(-1).float()


def test_truncation_bootstrap_normalises_the_final_obs_as_vecnormalize() -> None:
    """SB3's VecNormalize updates its statistics with the step's new (reset) observation, then normalises
    `terminal_observation`; the bootstrap gamma * V(final obs) must see the same statistics."""
    gamma, steps = 0.5, 3
    m = module(env={"id": "Pendulum-v1", "num_envs": 1, "normalize_obs": True, "kwargs": {"max_episode_steps": steps}},
               gamma=gamma)
    m.collector.start(seed=4)
    batch = m.collector.collect(ValueIsObsSum(), steps)
    m.collector.close()
    # The same stream by hand: one env, same seed, zero actions; statistics updated with every observation.
    from zoo.rl.normalize import RunningMeanStd

    env, rms = gym.make("Pendulum-v1", max_episode_steps=steps), RunningMeanStd((3,))
    obs, _ = env.reset(seed=4)
    rms.update(obs[None])
    for _ in range(steps):
        final, reward, _, truncated, _ = env.step(np.zeros(1, np.float32))
        rms.update(env.reset()[0][None] if truncated else final[None])  # SAME_STEP: the reset obs is the next
    expected = np.float32(reward) + gamma * float(rms.normalize(final[None], 10.0).sum())
    assert truncated and float(batch.rewards[-1, 0]) == pytest.approx(expected, rel=1e-5)


def test_update_statistics_average_the_minibatches_as_sb3(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """approx_kl is the mean over the last epoch's minibatches and the losses the mean over all of them (SB3's
    logger), not the last minibatch's value."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger

    from zoo.rl import ppo

    calls = iter(range(1, 1000))
    real = ppo.policy_loss

    def numbered(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the k-th minibatch reports KL k
        loss, _, clip = real(*args, **kwargs)
        return loss, torch.tensor(float(next(calls))), clip

    monkeypatch.setattr(ppo, "policy_loss", numbered)
    # Per update 2 epochs x 2 minibatches: KLs 1, 2 | 3, 4 -> the last epoch's mean is 3.5 (the last minibatch
    # alone: 4); the second update 5, 6 | 7, 8 -> 7.5.
    m = module(update_epochs=2, eval_every=1, video=False,
               optimizer=__import__("functools").partial(torch.optim.Adam, lr=1e-3))
    trainer = pl.Trainer(accelerator="cpu", max_epochs=-1, logger=CSVLogger(tmp_path), log_every_n_steps=1,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    trainer.fit(m)
    import csv

    (path,) = tmp_path.rglob("metrics.csv")
    rows = [r for r in csv.DictReader(path.open()) if r.get("train/approx_kl")]
    assert [float(r["train/approx_kl"]) for r in rows] == [3.5, 7.5]
