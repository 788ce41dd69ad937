"""The PPO maths, the normalisers and the agents' distributions, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.rl import ppo
from zoo.rl.models import build_agent
from zoo.rl.normalize import RewardScaler, RunningMeanStd, sync_running_stats


def test_gae_hand_computed_with_episode_boundary() -> None:
    # One env, 3 steps; the step at t=1 ends an episode (so dones[2] = 1: obs 2 starts a new one).
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [1.0], [1.5]])
    d = torch.tensor([[0.0], [0.0], [1.0]])
    nv, nd = torch.tensor([2.0]), torch.tensor([0.0])
    g, lam = 0.9, 0.8
    d2 = 3 + g * 2.0 - 1.5                      # bootstraps from next_value
    d1 = 2 - 1.0                                 # terminal: no bootstrap
    d0 = 1 + g * 1.0 - 0.5
    a2, a1 = d2, d1                               # the boundary cuts the recursion
    a0 = d0 + g * lam * a1
    adv, ret = ppo.gae(r, v, d, nv, nd, g, lam)
    assert torch.allclose(adv[:, 0], torch.tensor([a0, a1, a2]))
    assert torch.allclose(ret, adv + v)


def test_gae_lambda_one_is_discounted_return_minus_value() -> None:
    r, v = torch.ones(4, 2), torch.zeros(4, 2)
    adv, _ = ppo.gae(r, v, torch.zeros(4, 2), torch.zeros(2), torch.ones(2), gamma=0.5, lam=1.0)
    assert torch.allclose(adv[0], torch.full((2,), 1 + 0.5 + 0.25 + 0.125))


def test_policy_loss_clips_and_reports_kl() -> None:
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 1.0]))  # ratios 1.5, 1.5, 0.5, 1.0
    adv = torch.tensor([1.0, -1.0, 1.0, 2.0])
    loss, kl, clipfrac = ppo.policy_loss(new, old, adv, clip_coef=0.2)
    # per-sample max(-A r, -A clip(r)): -1.2, 1.5, -0.5, -2.0
    assert loss.item() == pytest.approx((-1.2 + 1.5 - 0.5 - 2.0) / 4)
    assert clipfrac.item() == pytest.approx(0.75)
    ratio = new.exp()
    assert kl.item() == pytest.approx(((ratio - 1) - new).mean().item())


def test_value_loss_clipped_is_pessimistic() -> None:
    old, ret = torch.tensor([0.0]), torch.tensor([1.0])
    new = torch.tensor([0.5])  # moved 0.5 but the clip allows 0.2: the clipped error (0.8^2) is larger
    assert ppo.value_loss(new, old, ret, None).item() == pytest.approx(0.5 * 0.25)
    assert ppo.value_loss(new, old, ret, 0.2).item() == pytest.approx(0.5 * 0.64)


def test_advantage_normalisation_and_explained_variance() -> None:
    a = ppo.normalize_advantages(torch.tensor([1.0, 2.0, 3.0]))
    assert a.mean().abs() < 1e-6 and a.std().item() == pytest.approx(1.0, abs=1e-5)
    assert ppo.normalize_advantages(torch.tensor([3.0])).item() == 3.0
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert ppo.explained_variance(y, y) == pytest.approx(1.0)
    assert ppo.explained_variance(torch.full((4,), 2.5), y) == pytest.approx(0.0)
    assert ppo.linear_anneal(0, 10) == 1.0 and ppo.linear_anneal(9, 10) == pytest.approx(0.1)


def test_running_mean_std_matches_numpy_and_round_trips() -> None:
    torch.manual_seed(0)
    data = torch.randn(300, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 2
    rms = RunningMeanStd((3,), epsilon=0.0 + 1e-12)
    for chunk in data.split(7):
        rms.update(chunk)
    assert torch.allclose(rms.mean, data.mean(0), atol=1e-8)
    assert torch.allclose(rms.var, data.var(0, unbiased=False), atol=1e-8)
    copy = RunningMeanStd((3,))
    copy.load_state_dict(rms.state_dict())
    x = torch.randn(5, 3)
    assert torch.equal(copy.normalize(x, 10.0), rms.normalize(x, 10.0))
    assert rms.normalize(torch.full((1, 3), 1e6), 5.0).max() == 5.0


def test_sync_running_stats_pools_ranks() -> None:
    a, b = RunningMeanStd(()), RunningMeanStd(())
    a.update(torch.tensor([0.0, 2.0]))
    b.update(torch.tensor([10.0, 12.0]))
    pooled = torch.tensor([0.0, 2.0, 10.0, 12.0])
    # emulate a 2-rank all-reduce(mean) by averaging the two ranks' tensors
    pairs = iter([(a.mean.clone(), b.mean.clone()), (a.var + a.mean**2, b.var + b.mean**2)])
    sync_running_stats(a, lambda t: sum(next(pairs)) / 2)
    assert a.mean.item() == pytest.approx(pooled.mean().item(), rel=1e-3)
    assert a.var.item() == pytest.approx(pooled.var(unbiased=False).item(), rel=1e-3)


def test_reward_scaler_divides_by_return_std_and_resets_on_done() -> None:
    s = RewardScaler(num_envs=2, gamma=0.9)
    for _ in range(50):
        out = s(torch.tensor([1.0, 1.0]), torch.tensor([False, True]), clip=10.0)
    assert s.ret[1] == 0.0 and s.ret[0] > 5  # env 1 ends every step, env 0 accumulates
    assert out[0] == pytest.approx(1.0 / math.sqrt(s.rms.var.item() + 1e-8), rel=1e-5)


@pytest.mark.parametrize("action", [{"type": "discrete", "n": 3},
                                    {"type": "box", "shape": [2], "low": [-1.0, -1.0], "high": [1.0, 1.0]}])
def test_agent_sampling_log_prob_matches_distribution(action: dict) -> None:
    torch.manual_seed(0)
    agent = build_agent("mlp", {"obs_shape": [4], "obs_dtype": "float32", "action": action})
    if action["type"] == "box":
        agent.head.log_std.data.fill_(-0.5)
    obs = torch.randn(8, 4)
    a, logp, v = agent.act(obs)
    new_logp, entropy, v2 = agent.evaluate(obs, a)
    assert torch.allclose(logp, new_logp, atol=1e-5) and torch.allclose(v, v2)
    assert v.shape == (8,) and entropy.shape == (8,)
    det, _, _ = agent.act(obs, deterministic=True)
    assert torch.equal(det, agent.act(obs, deterministic=True)[0])


@pytest.mark.parametrize("action", [{"type": "discrete", "n": 3},
                                    {"type": "box", "shape": [2], "low": [-1.0, -1.0], "high": [1.0, 1.0]}])
def test_closed_form_log_prob_and_entropy_match_torch_distributions(action: dict) -> None:
    from torch.distributions import Categorical, Normal

    from zoo.rl.models.agents import PolicyHead

    torch.manual_seed(0)
    head = PolicyHead(action)
    out = torch.randn(16, head.out_dim, requires_grad=True)
    if head.discrete:
        a = torch.randint(0, 3, (16,))
        d = Categorical(logits=out)
        ref_logp, ref_ent = d.log_prob(a), d.entropy()
    else:
        head.log_std.data = torch.tensor([-0.5, 0.3])
        a = torch.randn(16, 2)
        d = Normal(out, head.log_std.exp().expand_as(out))
        ref_logp, ref_ent = d.log_prob(a).sum(-1), d.entropy().sum(-1)
    logp, ent = head.log_prob_entropy(out, a)
    assert logp.shape == ent.shape == (16,)
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    # Same gradients too (what the update follows).
    g = torch.autograd.grad((logp + ent).sum(), [out, *head.parameters()])
    g_ref = torch.autograd.grad((ref_logp + ref_ent).sum(), [out, *head.parameters()])
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(g, g_ref))


def test_action_is_the_deterministic_act_without_the_value_pass() -> None:
    torch.manual_seed(0)
    agent = build_agent("mlp", {"obs_shape": [4], "obs_dtype": "float32", "action": {"type": "discrete", "n": 2}})
    obs = torch.randn(32, 4)
    assert torch.equal(agent.action(obs), agent.act(obs, deterministic=True)[0])


def test_orthogonal_init_small_policy_head() -> None:
    agent = build_agent("mlp", {"obs_shape": [4], "obs_dtype": "float32", "action": {"type": "discrete", "n": 2}})
    w = agent.actor[-1].weight  # gain 0.01: near-uniform initial policy (detail #2)
    assert w.abs().max() < 0.02 and agent.actor[0].bias.abs().sum() == 0


def test_nature_cnn_shapes() -> None:
    agent = build_agent("nature_cnn", {"obs_shape": [4, 84, 84], "obs_dtype": "uint8",
                                       "action": {"type": "discrete", "n": 6}})
    obs = torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)
    a, logp, v = agent.act(obs)
    assert a.shape == (2,) and logp.shape == (2,) and v.shape == (2,)
