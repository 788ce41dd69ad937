"""The PPO maths as pure functions (each has a unit test in tests/rl/test_ppo_math.py).

Follows "The 37 Implementation Details of PPO" (Huang et al., ICLR blog track 2022,
https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/) and CleanRL's ppo.py.
"""

from __future__ import annotations

import torch
from torch import Tensor


def gae(rewards: Tensor, values: Tensor, dones: Tensor, next_value: Tensor, next_done: Tensor,
        gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

    rewards, values, dones: (T, N); `dones[t]` says the observation at step t started a new episode, i.e. the step
    before it ended one (CleanRL's convention). next_value, next_done: (N,) for the observation after the last step.
    Returns (advantages, returns), both (T, N); returns = advantages + values (the value targets).
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, next_v = 1.0 - next_done.float(), next_value
        else:
            nonterminal, next_v = 1.0 - dones[t + 1].float(), values[t + 1]
        delta = rewards[t] + gamma * next_v * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        advantages[t] = last
    return advantages, advantages + values


def normalize_advantages(adv: Tensor, eps: float = 1e-8) -> Tensor:
    """Per-minibatch advantage normalisation (detail #7). A minibatch of one keeps its sign, not NaN."""
    if adv.numel() < 2:
        return adv
    return (adv - adv.mean()) / (adv.std() + eps)


def policy_loss(new_logp: Tensor, old_logp: Tensor, adv: Tensor, clip_coef: float) -> tuple[Tensor, Tensor, Tensor]:
    """Clipped surrogate objective (PPO paper eq. 7), as a loss to minimise.

    Returns (loss, approx_kl, clip_fraction); approx_kl is the low-variance estimator (ratio - 1) - log ratio
    (http://joschu.net/blog/kl-approx.html).
    """
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return loss, approx_kl, clip_fraction


def value_loss(new_value: Tensor, old_value: Tensor, returns: Tensor, clip_coef: float | None) -> Tensor:
    """0.5 * MSE to the returns; with clip_coef, the pessimistic max of the clipped and unclipped errors (detail #9)."""
    unclipped = (new_value - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    clipped_value = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
    clipped = (clipped_value - returns) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


def explained_variance(pred: Tensor, target: Tensor) -> float:
    """1 - Var[target - pred] / Var[target]: 1 is a perfect value function, 0 no better than a constant."""
    var = target.var()
    if var == 0:
        return float("nan")
    return float(1 - (target - pred).var() / var)


def linear_anneal(update: int, num_updates: int) -> float:
    """Learning-rate factor for update `update` (0-based) of `num_updates`: 1 -> 1/num_updates (detail #4)."""
    return 1.0 - update / max(1, num_updates)
