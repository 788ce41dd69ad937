"""Export and serving hooks for rl/ppo (found by zoo/kit/hooks.py; called by `zoo export` and `zoo serve`).

Exported graph: raw observations (B, *obs_shape), exactly as the gymnasium env (with the zoo's wrappers) returns
them -> the deterministic action (argmax for Discrete, the clipped mean for Box) and the policy's logits / mean.
The observation normalisation (running mean/std, clip) is folded into the graph, so a plain ONNX Runtime loop
plays the env: `action = session.run(["action"], {"obs": obs[None]})[0][0]` (the loop of
`scripts/evidence/bench_deploy.py play`; see docs/deploy.md and tests/deploy/test_export.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import Budget, Examples, Graph, compare

FORMATS = ("onnx", "torchscript", "exported_program")
EXPORTER = "dynamo"
TOLERANCE = 1e-4


class _Policy(torch.nn.Module):
    """obs (B, *obs_shape) raw -> (action (B,) int64 | (B, A) float32, logits (B, n) | mean (B, A))."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.agent = module.agent
        spec, env = module.spec, module.env_cfg
        self.discrete = spec["action"]["type"] == "discrete"
        rms = module.collector.obs_rms
        self.normalize, self.clip = rms is not None, float(env["clip_obs"])
        shape = spec["obs_shape"]
        mean = rms.mean.float() if rms is not None else torch.zeros(shape)
        std = torch.sqrt(rms.var + 1e-8).float() if rms is not None else torch.ones(shape)
        self.register_buffer("obs_mean", mean)
        self.register_buffer("obs_std", std)
        low = spec["action"].get("low", [0.0])
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(spec["action"].get("high", [0.0]), dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs if obs.dtype == torch.uint8 else obs.float()
        if self.normalize:  # zoo.rl.normalize.RunningMeanStd.normalize with the frozen statistics
            x = ((x - self.obs_mean) / self.obs_std).clamp(-self.clip, self.clip)
        out = self.agent.policy_out(x)
        action = out.argmax(-1) if self.discrete else torch.maximum(torch.minimum(out, self.high), self.low)
        return action, out


def export_graph(module: Any) -> Graph:
    second = "logits" if module.spec["action"]["type"] == "discrete" else "mean"
    return Graph(_Policy(module), ["obs"], ["action", second],
                 {"obs": {0: "batch"}, "action": {0: "batch"}, second: {0: "batch"}})


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    """n observations the agent itself meets: the trained policy plays the checkpoint's env (seed 0)."""
    from zoo.rl.envs import make_single

    env = make_single(module.env_cfg["id"], env_kwargs=module.env_cfg["kwargs"])
    policy = module.collector.policy(module.agent, deterministic=True)
    obs_list = []
    try:
        obs, _ = env.reset(seed=0)
        while len(obs_list) < n:
            obs_list.append(np.asarray(obs))
            obs, _, terminated, truncated, _ = env.step(policy(np.asarray(obs)[None])[0])
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    batch = torch.as_tensor(np.stack(obs_list))
    return [Examples((batch if batch.dtype == torch.uint8 else batch.float(),))]


def metadata(module: Any, cfg: Any) -> dict:
    spec, env = module.spec, module.env_cfg
    rms = module.collector.obs_rms
    return {
        "env": {"id": env["id"], "kwargs": dict(env["kwargs"] or {}), "observation_shape": spec["obs_shape"],
                "observation_dtype": spec["obs_dtype"], "action_space": spec["action"]},
        "preprocess": {
            "observation": "the env's raw observation, batched: obs[None]",
            "normalization": ({"folded_into_graph": True, "mean": rms.mean.tolist(), "var": rms.var.tolist(),
                               "clip": env["clip_obs"], "formula": "clip((obs - mean) / sqrt(var + 1e-8))"}
                              if rms is not None else None),
        },
        "postprocess": {"action": "argmax of the logits (Discrete)" if spec["action"]["type"] == "discrete"
                        else "the policy mean clipped to the action bounds (Box)"},
    }


def extra_files(module: Any) -> dict[str, bytes]:
    return {}


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    same = np.all((ref[0] == out[0]) if ref[0].dtype.kind in "iu" else np.abs(ref[0] - out[0]) <= TOLERANCE,
                  axis=tuple(range(1, ref[0].ndim)))
    return compare(ref, out, TOLERANCE, float(np.mean(same)))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> None:
    return None


# ---------------------------------------------------------------------------------------------- serving
class Handler:
    """POST /predict with JSON {"observation": [...]} or {"observations": [[...], ...]} -> actions."""

    content_types = ("application/json",)
    pad: dict[str, float] = {}

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        self.shape = tuple(meta["env"]["observation_shape"])
        self.dtype = np.uint8 if meta["env"]["observation_dtype"] == "uint8" else np.float32
        self.discrete = meta["env"]["action_space"]["type"] == "discrete"

    def decode(self, body: bytes, content_type: str, budget: Budget | None = None) -> dict[str, np.ndarray]:
        from zoo.kit.deploy import BadRequest, json_body

        req = json_body(body)
        obs = req.get("observations", [req["observation"]] if "observation" in req else None)
        if isinstance(obs, list):
            (budget or Budget()).items(len(obs), "observations")
        try:
            arr = np.asarray(obs, dtype=self.dtype)
        except (TypeError, ValueError):
            arr = None
        if obs is None or arr is None or arr.shape[1:] != self.shape or len(arr) == 0:
            got = "nothing" if obs is None else f"shape {tuple(getattr(arr, 'shape', ()))[1:]}"
            raise BadRequest(422, f"an observation must have shape {list(self.shape)}, got {got}; send "
                                  '{"observation": [...]} or {"observations": [[...], ...]}')
        return {"obs": arr}

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        actions = outputs[0]
        return {"actions": [int(a) for a in actions] if self.discrete else actions.tolist()}
