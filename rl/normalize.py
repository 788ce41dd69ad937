"""Observation normalisation and reward scaling for continuous control (details #3 and #4 of the continuous list).

The statistics are buffers of the LightningModule, so they travel in `state_dict`: saved in every checkpoint,
restored on resume, test and predict, and identical on every DDP rank after `sync_running_stats`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


class RunningMeanStd(nn.Module):
    """Running mean and variance over a stream of batches (Chan et al.'s parallel algorithm), in float64."""

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor | np.ndarray) -> None:
        """x: (B, *shape). On the CPU the arithmetic runs in numpy on the buffers' own memory: a rollout calls this
        once per environment step, where a dozen tiny torch ops cost several times numpy's (docs/rl.md)."""
        if self.mean.device.type != "cpu":
            x = torch.as_tensor(x, dtype=torch.float64, device=self.mean.device)
            self.update_from_moments(x.mean(0), x.var(0, unbiased=False), x.shape[0])
            return
        a = np.asarray(x, dtype=np.float64)
        n = a.shape[0]
        batch_mean, batch_var = (a[0], 0.0) if n == 1 else (a.mean(0), a.var(0))
        mean, var, count = self.mean.numpy(), self.var.numpy(), self.count.numpy()
        delta = batch_mean - mean
        total = count + n
        var[...] = (var * count + batch_var * n + delta**2 * (count * n / total)) / total
        mean += delta * (n / total)
        count[...] = total

    @torch.no_grad()
    def update_from_moments(self, mean: Tensor, var: Tensor, count: float) -> None:
        delta = mean - self.mean
        total = self.count + count
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.mean.add_(delta * count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: Tensor | np.ndarray, clip: float) -> Tensor:
        """(x - mean) / sqrt(var + 1e-8), clipped to [-clip, clip], as float32 (numpy on the CPU, as update)."""
        if self.mean.device.type != "cpu":
            x = torch.as_tensor(x, device=self.mean.device)
            return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-clip, clip).to(torch.float32)
        a = np.asarray(x, dtype=np.float64)
        out = (a - self.mean.numpy()) / np.sqrt(self.var.numpy() + 1e-8)
        return torch.from_numpy(np.minimum(np.maximum(out, -clip), clip).astype(np.float32))  # np.clip: 2x slower


class RewardScaler(nn.Module):
    """Divides rewards by the running std of the discounted return (what SB3's VecNormalize and gymnasium's
    NormalizeReward do). The per-env running return is transient state (not saved: it restarts at 0 on resume)."""

    def __init__(self, num_envs: int, gamma: float) -> None:
        super().__init__()
        self.gamma = gamma
        self.rms = RunningMeanStd(())
        self.register_buffer("ret", torch.zeros(num_envs, dtype=torch.float64), persistent=False)

    @torch.no_grad()
    def __call__(self, reward: Tensor | np.ndarray, done: Tensor | np.ndarray, clip: float) -> Tensor:
        """reward, done: (N,) for one vector step; returns the scaled reward (N,) float32. numpy on the buffers'
        memory, as RunningMeanStd.update (once per environment step)."""
        ret = self.ret.numpy()
        r = np.asarray(reward, dtype=np.float64)
        ret *= self.gamma
        ret += r
        self.rms.update(ret)  # (N,) -> a scalar mean/var
        ret[np.asarray(done, dtype=bool)] = 0.0
        scaled = r / np.sqrt(self.rms.var.numpy() + 1e-8)
        return torch.from_numpy(np.minimum(np.maximum(scaled, -clip), clip).astype(np.float32))


def sync_running_stats(rms: RunningMeanStd, reduce_mean) -> None:  # noqa: ANN001 - strategy.reduce-like callable
    """Make every DDP rank hold the same statistics: the pooled mean and variance of the ranks' statistics.

    All ranks see the same number of samples, so pooling is an average of means and of (var + mean^2).
    """
    mean = reduce_mean(rms.mean.clone())
    second = reduce_mean(rms.var + rms.mean**2)
    rms.mean.copy_(mean)
    rms.var.copy_((second - mean**2).clamp_min(0.0))
