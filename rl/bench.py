"""`zoo bench` hooks for rl: throughput in environment steps per second. One training batch is one PPO update
(a rollout of num_envs x num_steps environment steps, then the update epochs), so a step's units are the rollout's."""

from __future__ import annotations

from typing import Any

UNIT = "env-steps"
BATCH_KEY = "task.env.num_envs"
LOSS_KEY = "train/value_loss"  # PPO logs its losses to the loggers directly; the value loss shows a broken update
# The bench stops the fit itself: no stop at total_timesteps, no end-of-training video.
RUN_OVERRIDES = {"task": {"module": {"total_timesteps": 10**12, "video": False}}}


def units(module: Any, batch: Any) -> float:
    return float(module.batch_size)  # num_envs * num_steps on this rank
