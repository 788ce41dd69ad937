"""`task.module.pretrained=` for PPO: start from another rl/ppo run's agent (a zoo .ckpt) or a weights file.

Same observation space: required (the encoder/hidden layers and the value network read the observations). A
different action space (CartPole's Discrete(2) -> another Discrete(n), or MountainCar -> MountainCarContinuous) is
fine: the policy's output layer and its log-std start fresh, the rest loads. Observation normalisation statistics come
with a checkpoint; reward statistics only from the same environment (another env's rewards have another scale).
"""

from __future__ import annotations

import logging
from typing import Any

from zoo.errors import ZooError
from zoo.kit.pretrained import announce_report, match_weights, read_pretrained, weights_path

TASK = "rl/ppo"
log = logging.getLogger(__name__)


def policy_head(agent: Any) -> tuple[str, ...]:
    """Names of the tensors that depend on the action space: the actor's output layer and the Gaussian log-std."""
    actor = agent.actor
    last = f"actor.{len(actor) - 1}." if hasattr(actor, "__len__") else "actor."  # MLP: last Linear; CNN: one Linear
    return (last, "head.")


def _spaces(spec: dict) -> str:
    a = spec["action"]
    act = f"Discrete({a['n']})" if a["type"] == "discrete" else f"Box{tuple(a['shape'])}"
    return f"obs {tuple(spec['obs_shape'])}, action {act}"


def load_pretrained(module: Any, value: Any) -> dict | None:
    """Load `value` into module.agent (and the normalisation statistics); the report by name, or None."""
    path = weights_path(value, TASK)
    if path is None:
        return None
    weights, ckpt = read_pretrained(path, TASK)
    state = (ckpt or {}).get("rl")
    if ckpt is not None and state is None:
        raise ZooError(f"task.module.pretrained={path} is not an rl/ppo checkpoint (no checkpoint['rl']); pass a "
                       "run's last.ckpt")
    spec, same_action = module.spec, True
    if state is not None:
        old = state["spec"]
        if old["obs_shape"] != spec["obs_shape"] or old.get("obs_dtype") != spec.get("obs_dtype"):
            raise ZooError(f"pretrained={path} was trained on {state['env_id']} ({_spaces(old)}), this run is "
                           f"{module.env_cfg['id']} ({_spaces(spec)}); the spaces must match in observations (a new "
                           "action space is fine: the policy head starts fresh)")
        same_action = old["action"] == spec["action"]
    if any(k.startswith("agent.") for k in weights):  # a module's state dict: the agent's part
        weights = {k[len("agent."):]: v for k, v in weights.items() if k.startswith("agent.")}
    fresh = () if same_action else policy_head(module.agent)
    load, report = match_weights(module.agent.state_dict(), weights, path, "PPO agent", fresh=fresh)
    module.agent.load_state_dict(load, strict=False)
    notes = []
    if state is not None:
        norm = dict(state["normalization"])
        if state["env_id"] != module.env_cfg["id"]:
            norm.pop("reward_rms", None)  # another env's return scale
        module.collector.load_state_dict(norm)
        if norm:
            notes.append(f"normalisation statistics loaded: {', '.join(sorted(norm))}")
        if not same_action:
            notes.append(f"action space {_spaces(state['spec']).split('action ')[1]} -> "
                         f"{_spaces(spec).split('action ')[1]}: new policy head")
    report["notes"] = notes
    report["line"] = announce_report(report, log)
    return report
