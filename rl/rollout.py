"""Collecting PPO rollouts from a vector env, on CPU.

`Collector` owns the training envs, the observation/reward normalisers and the episode statistics. The agent it
acts with is whatever the module passes (a CPU copy when the learner lives on a GPU: small policies act faster on
the CPU, and the envs are there anyway).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from zoo.rl.envs import make_vector_env
from zoo.rl.normalize import RewardScaler, RunningMeanStd


@dataclass
class Batch:
    """One rollout, time-major: obs (T, N, *obs), actions (T, N[, A]), logp/values/rewards/dones (T, N),
    next_value/next_done (N,) for the bootstrap after the last step."""

    obs: Tensor
    actions: Tensor
    logp: Tensor
    values: Tensor
    rewards: Tensor
    dones: Tensor
    next_value: Tensor
    next_done: Tensor
    episode_returns: list[float]
    episode_lengths: list[int]


class Collector:
    def __init__(self, env: dict, spec: dict, gamma: float, bootstrap_truncated: bool = True) -> None:
        self.cfg, self.spec, self.gamma = env, spec, gamma
        self.bootstrap_truncated = bootstrap_truncated
        self.discrete = spec["action"]["type"] == "discrete"
        if not self.discrete:
            self.low = np.asarray(spec["action"]["low"], dtype=np.float32)
            self.high = np.asarray(spec["action"]["high"], dtype=np.float32)
        self.obs_rms = RunningMeanStd(tuple(spec["obs_shape"])) if env["normalize_obs"] else None
        self.reward_scaler = RewardScaler(env["num_envs"], gamma) if env["normalize_reward"] else None
        self.recent: deque[float] = deque(maxlen=20)  # returns of the last 20 finished episodes
        self.envs = None

    # ----------------------------------------------------------------------------------------- env plumbing
    def start(self, seed: int) -> None:
        """(Re)create the envs and reset them; sub-env i is seeded with seed + i."""
        self.close()
        c = self.cfg
        self.envs = make_vector_env(c["id"], c["num_envs"], c["vectorization"], c.get("kwargs"))
        obs, _ = self.envs.reset(seed=seed)
        self.next_obs = self.process_obs(obs, update=True)
        self.next_done = torch.zeros(c["num_envs"], dtype=torch.bool)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
            self.envs = None

    def process_obs(self, obs: np.ndarray, update: bool) -> Tensor:
        """Raw env observations -> the agent's input (normalised and clipped if enabled; uint8 frames kept)."""
        if self.obs_rms is None:
            x = torch.as_tensor(np.asarray(obs))
            return x if x.dtype == torch.uint8 else x.float()
        if update:
            self.obs_rms.update(obs)
        return self.obs_rms.normalize(obs, self.cfg["clip_obs"])

    def env_action(self, action: Tensor) -> np.ndarray:
        a = action.numpy()
        return a if self.discrete else np.clip(a, self.low, self.high)  # sample kept unclipped for log-probs

    def policy(self, agent: torch.nn.Module, deterministic: bool = True):  # noqa: ANN201
        """A numpy policy for zoo.rl.evaluate: normalises with the current (frozen) statistics."""

        def act(obs: np.ndarray) -> np.ndarray:
            x = self.process_obs(obs, update=False)
            device = next(agent.parameters()).device
            return self.env_action(agent.action(x.to(device), deterministic=deterministic).cpu())

        return act

    # ------------------------------------------------------------------------------------------------ rollout
    @torch.no_grad()
    def collect(self, agent: torch.nn.Module, num_steps: int) -> Batch:
        n = self.cfg["num_envs"]
        obs_buf = torch.zeros((num_steps, *self.next_obs.shape), dtype=self.next_obs.dtype)
        act_shape = () if self.discrete else (len(self.low),)
        act_buf = torch.zeros((num_steps, n, *act_shape), dtype=torch.long if self.discrete else torch.float32)
        logp, values, rewards = (torch.zeros(num_steps, n) for _ in range(3))
        dones = torch.zeros(num_steps, n, dtype=torch.bool)
        ep_returns, ep_lengths = [], []
        for t in range(num_steps):
            obs_buf[t], dones[t] = self.next_obs, self.next_done
            action, logp[t], values[t] = agent.act(self.next_obs)
            act_buf[t] = action
            obs, reward, terminated, truncated, info = self.envs.step(self.env_action(action))
            done = torch.as_tensor(np.logical_or(terminated, truncated))
            r = torch.as_tensor(reward, dtype=torch.float32)
            if self.cfg["reward_sign"]:
                r = r.sign()  # Atari: clip rewards to {-1, 0, 1}; the episode statistics stay raw
            if self.reward_scaler is not None:
                r = self.reward_scaler(r, done, self.cfg["clip_reward"])
            # The new observations update the statistics before a final observation is normalised for its
            # bootstrap value, as VecNormalize normalises `terminal_observation` after its update in SB3.
            self.next_obs, self.next_done = self.process_obs(obs, update=True), done
            if self.bootstrap_truncated and truncated.any():
                r = r + self.gamma * self._final_values(agent, info, truncated & ~terminated)
            rewards[t] = r
            if "_episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    ep_returns.append(float(info["episode"]["r"][i]))
                    ep_lengths.append(int(info["episode"]["l"][i]))
        self.recent.extend(ep_returns)
        next_value = agent.value(self.next_obs)
        return Batch(obs_buf, act_buf, logp, values, rewards, dones, next_value, self.next_done,
                     ep_returns, ep_lengths)

    def _final_values(self, agent: torch.nn.Module, info: dict, truncated: np.ndarray) -> Tensor:
        """gamma * V(final obs) is added to the reward of a time-limit truncation: the episode did not end, the
        clock did (Pardo et al. 2018, https://arxiv.org/abs/1712.00378). Zero for the other envs."""
        out = torch.zeros(len(truncated))
        idx = np.flatnonzero(truncated)
        if len(idx) == 0 or "final_obs" not in info:
            return out
        final = np.stack([info["final_obs"][i] for i in idx])
        out[torch.as_tensor(idx)] = agent.value(self.process_obs(final, update=False))
        return out

    # ---------------------------------------------------------------------------------- checkpointed state
    def state_dict(self) -> dict:
        out = {}
        if self.obs_rms is not None:
            out["obs_rms"] = {k: v.clone() for k, v in self.obs_rms.state_dict().items()}
        if self.reward_scaler is not None:
            out["reward_rms"] = {k: v.clone() for k, v in self.reward_scaler.rms.state_dict().items()}
        return out

    def load_state_dict(self, state: dict) -> None:
        if self.obs_rms is not None and "obs_rms" in state:
            self.obs_rms.load_state_dict(state["obs_rms"])
        if self.reward_scaler is not None and "reward_rms" in state:
            self.reward_scaler.rms.load_state_dict(state["reward_rms"])
