"""PPO actor-critics: separate MLP policy and value networks (CleanRL's ppo.py / ppo_continuous_action.py), and
the Nature DQN CNN with shared trunk (Mnih et al. 2015) for Atari.

Orthogonal initialisation with gain sqrt(2) for hidden layers, 0.01 for the policy head and 1 for the value head
(detail #2), or PyTorch's default initialisation with `ortho_init=False` (rl-baselines3-zoo's MuJoCo recipes).
Continuous actions: a Gaussian with a state-independent learnable log-std starting at `log_std_init` (continuous
detail #1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def layer_init(layer: nn.Module, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(sizes: list[int], activation: str, out_gain: float, ortho_init: bool = True) -> nn.Sequential:
    """Linear layers of `sizes` with `activation` between them; ortho_init=False keeps nn.Linear's own init."""
    act = ACTIVATIONS[activation]
    init = layer_init if ortho_init else (lambda layer, gain=0.0: layer)
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [init(nn.Linear(a, b)), act()]
    layers.append(init(nn.Linear(sizes[-2], sizes[-1]), gain=out_gain))
    return nn.Sequential(*layers)


class PolicyHead(nn.Module):
    """Turns policy-network outputs into actions, log-probs and entropies (a Categorical, or a Gaussian whose
    state-independent log-std it holds for Box actions)."""

    def __init__(self, action: dict, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.discrete = action["type"] == "discrete"
        self.out_dim = action["n"] if self.discrete else int(action["shape"][0])
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((self.out_dim,), float(log_std_init)))

    def sample(self, out: Tensor, deterministic: bool) -> tuple[Tensor, Tensor]:
        """(action, log-prob); deterministic: argmax for Discrete, the mean for Box (clipped by the caller).

        No Distribution object: the rollout calls this once per env step, and
        torch.distributions' bookkeeping costs as much as the tiny MLP itself. Same maths as log_prob_entropy()."""
        if self.discrete:
            logp_all = out.log_softmax(-1)
            a = out.argmax(-1) if deterministic else torch.multinomial(logp_all.exp(), 1).squeeze(-1)
            return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        std = self.log_std.exp()
        a = out if deterministic else out + std * torch.randn_like(out)
        logp = -((a - out) ** 2) / (2 * std**2) - self.log_std - 0.5 * math.log(2 * math.pi)
        return a, logp.sum(-1)

    def log_prob_entropy(self, out: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """Log-prob (B,) of `action` and entropy (B,) of the policy: the closed forms of Categorical / Normal
        (tests/rl/test_ppo_math.py checks them against torch.distributions), without building a Distribution in
        each of the update's optimizer steps (a tenth of a CartPole step's time)."""
        if self.discrete:
            logp_all = out.log_softmax(-1).clamp(min=torch.finfo(out.dtype).min)  # no 0 * -inf in the entropy
            logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            return logp, -(logp_all.exp() * logp_all).sum(-1)
        std = self.log_std.exp()
        logp = -((action - out) ** 2) / (2 * std**2) - self.log_std - 0.5 * math.log(2 * math.pi)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum().expand(out.shape[0])
        return logp.sum(-1), entropy


class Agent(nn.Module):
    """Common interface: `policy_out(obs)`, `value(obs)`, `act(obs)` and `evaluate(obs, action)`."""

    head: PolicyHead

    def policy_out(self, obs: Tensor) -> Tensor:
        raise NotImplementedError

    def value(self, obs: Tensor) -> Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """obs (B, *obs_shape) -> action (B,) or (B, A), log-prob (B,), value (B,)."""
        action, logp = self.head.sample(self.policy_out(obs), deterministic)
        return action, logp, self.value(obs)

    @torch.no_grad()
    def action(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """The action alone (evaluation, videos, predict): no value-network pass."""
        return self.head.sample(self.policy_out(obs), deterministic)[0]

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Log-prob (B,), entropy (B,) and value (B,) of the taken actions, with gradients."""
        return (*self.head.log_prob_entropy(self.policy_out(obs), action), self.value(obs))


class MLPAgent(Agent):
    """Separate policy and value MLPs; `vf_sizes` None: the value network has the policy's widths."""

    def __init__(self, obs_dim: int, action: dict, hidden_sizes: list[int], activation: str = "tanh",
                 vf_sizes: list[int] | None = None, ortho_init: bool = True, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.head = PolicyHead(action, log_std_init)
        vf = hidden_sizes if vf_sizes is None else vf_sizes
        self.actor = mlp([obs_dim, *hidden_sizes, self.head.out_dim], activation, 0.01, ortho_init)
        self.critic = mlp([obs_dim, *vf, 1], activation, 1.0, ortho_init)

    def policy_out(self, obs: Tensor) -> Tensor:
        return self.actor(obs)

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(obs).squeeze(-1)


class CNNAgent(Agent):
    """Nature CNN trunk shared by actor and critic; uint8 frames (B, 4, 84, 84) are scaled to [0, 1] here."""

    def __init__(self, obs_shape: list[int], action: dict, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.head = PolicyHead(action, log_std_init)
        c, h, w = obs_shape
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.trunk(torch.zeros(1, c, h, w)).shape[1]
        self.trunk.append(layer_init(nn.Linear(flat, 512)))
        self.trunk.append(nn.ReLU())
        self.actor = layer_init(nn.Linear(512, self.head.out_dim), gain=0.01)
        self.critic = layer_init(nn.Linear(512, 1), gain=1.0)

    def features(self, obs: Tensor) -> Tensor:
        return self.trunk(obs.float() / 255.0)

    def policy_out(self, obs: Tensor) -> Tensor:
        return self.actor(self.features(obs))

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(self.features(obs)).squeeze(-1)

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h = self.features(obs)  # one trunk pass for both heads
        return (*self.head.log_prob_entropy(self.actor(h), action), self.critic(h).squeeze(-1))

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        h = self.features(obs)
        action, logp = self.head.sample(self.actor(h), deterministic)
        return action, logp, self.critic(h).squeeze(-1)
