"""Actor-critic networks, built by name from the environment's space description (see rl.envs.space_spec)."""

from __future__ import annotations

from torch import nn

from rl.models.agents import CNNAgent, MLPAgent
from zoo.errors import ZooError

ARCHS = {"mlp": MLPAgent, "nature_cnn": CNNAgent}


def list_models() -> list[str]:
    return sorted(ARCHS)


def build_agent(arch: str, spec: dict, hidden_sizes: list[int] | None = None, activation: str = "tanh") -> nn.Module:
    if arch not in ARCHS:
        raise ZooError(f"unknown agent arch '{arch}': available: {', '.join(list_models())}")
    obs_shape = list(spec["obs_shape"])
    if arch == "mlp" and len(obs_shape) != 1:
        raise ZooError(f"arch=mlp needs vector observations, got shape {obs_shape}; use arch=nature_cnn for images")
    if arch == "nature_cnn" and (len(obs_shape) != 3 or obs_shape[1] < 36 or obs_shape[2] < 36):
        raise ZooError(f"arch=nature_cnn needs (C, H, W) frames of at least 36x36, got shape {obs_shape}; "
                       "use arch=mlp for vector observations")
    if arch == "mlp":
        return MLPAgent(obs_shape[0], spec["action"], list(hidden_sizes or [64, 64]), activation)
    return CNNAgent(obs_shape, spec["action"])
