"""Actor-critic networks, built by name from the environment's space description (see zoo.rl.envs.space_spec)."""

from __future__ import annotations

from torch import nn

from zoo.errors import ZooError
from zoo.rl.models.agents import ACTIVATIONS, CNNAgent, MLPAgent

ARCHS = {"mlp": MLPAgent, "nature_cnn": CNNAgent}


def list_models() -> list[str]:
    return sorted(ARCHS)


def _widths(name: str, sizes: list[int] | None) -> list[int] | None:
    if sizes is None:
        return None
    if not sizes or not all(isinstance(n, int) and n >= 1 for n in sizes):
        raise ZooError(f"task.module.{name} must be a non-empty list of positive layer widths, got {sizes}")
    return list(sizes)


def build_agent(arch: str, spec: dict, hidden_sizes: list[int] | None = None, activation: str = "tanh",
                pi_hidden_sizes: list[int] | None = None, vf_hidden_sizes: list[int] | None = None,
                ortho_init: bool = True, log_std_init: float = 0.0) -> nn.Module:
    """`pi_hidden_sizes` / `vf_hidden_sizes` (None: `hidden_sizes`) are the policy's and the value net's widths."""
    if arch not in ARCHS:
        raise ZooError(f"unknown agent arch '{arch}': available: {', '.join(list_models())}")
    obs_shape = list(spec["obs_shape"])
    if arch == "mlp" and len(obs_shape) != 1:
        raise ZooError(f"arch=mlp needs vector observations, got shape {obs_shape}; use arch=nature_cnn for images")
    if arch == "nature_cnn" and (len(obs_shape) != 3 or obs_shape[1] < 36 or obs_shape[2] < 36):
        raise ZooError(f"arch=nature_cnn needs (C, H, W) frames of at least 36x36, got shape {obs_shape}; "
                       "use arch=mlp for vector observations")
    if activation not in ACTIVATIONS:
        raise ZooError(f"unknown task.module.activation '{activation}': available: {', '.join(ACTIVATIONS)}")
    if arch == "mlp":
        shared = _widths("hidden_sizes", hidden_sizes) or [64, 64]
        pi = _widths("pi_hidden_sizes", pi_hidden_sizes) or shared
        vf = _widths("vf_hidden_sizes", vf_hidden_sizes) or shared
        return MLPAgent(obs_shape[0], spec["action"], pi, activation, vf, ortho_init, log_std_init)
    if not ortho_init:
        raise ZooError("task.module.ortho_init=false applies to arch=mlp; the Nature CNN keeps its orthogonal init")
    return CNNAgent(obs_shape, spec["action"], log_std_init)
