"""Stable-Baselines3's PPO on a MuJoCo env with rl-baselines3-zoo's recipe: the reference for experiment=rl_hopper,
rl_halfcheetah and rl_walker2d (scripts/evidence/bench_rl.py sb3_mujoco runs it in pairs with the zoo).

    PYTHONPATH=/tmp/rl/sb3lib OMP_NUM_THREADS=1 python scripts/evidence/sb3_ppo_mujoco.py --env Hopper-v5 --steps 100000

The recipe is the one the zoo's presets map key by key (hyperparams/ppo.yml; docs/rl.md), read back from the preset
files so that both sides use the same numbers: VecNormalize (observations and rewards, the recipe's gamma), 1 env,
and, as the zoo run does, an evaluation of 10 deterministic episodes on a separate env every 10,240 steps and at
the end. Prints one JSON line: the final evaluation's mean and std and the steps. SB3 is not a zoo dependency:
install it outside the project (pip install --target /tmp/rl/sb3lib --no-deps stable-baselines3); without it the
script says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {"Hopper-v5": "rl_hopper", "HalfCheetah-v5": "rl_halfcheetah", "Walker2d-v5": "rl_walker2d"}


def recipe(env_id: str) -> dict:
    """The preset's module keys, turned back into SB3's names."""
    m = yaml.safe_load((ROOT / "configs" / "experiment" / f"{PRESETS[env_id]}.yaml").read_text())["task"]["module"]
    return {"n_steps": m["num_steps"], "batch_size": m["num_steps"] // m["num_minibatches"],
            "n_epochs": m["update_epochs"], "gamma": m["gamma"], "gae_lambda": m["gae_lambda"],
            "clip_range": m["clip_coef"], "ent_coef": m["ent_coef"], "vf_coef": m["vf_coef"] / 2,
            "max_grad_norm": m["max_grad_norm"], "learning_rate": float(m["optimizer"]["lr"]),
            "net": m["pi_hidden_sizes"], "vf": m["vf_hidden_sizes"], "activation": m["activation"],
            "ortho_init": m["ortho_init"], "log_std_init": m["log_std_init"], "eval_every": m["eval_every"]}


def evaluate(model, norm, env_id: str, seed: int, episodes: int = 10) -> np.ndarray:  # noqa: ANN001
    """Deterministic episodes on a separate env, observations normalised with the training statistics (frozen)."""
    import gymnasium as gym

    env, returns = gym.make(env_id), []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(norm.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return np.array(returns)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="Hopper-v5", choices=list(PRESETS))
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", default="", help="a folder for SB3's own progress.csv (train/explained_variance, "
                    "train/approx_kl, ... per update), to set beside the zoo's metrics.csv")
    a = ap.parse_args()
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize
    except ImportError:
        print("stable-baselines3 is not importable; pip install --target /tmp/rl/sb3lib --no-deps "
              "stable-baselines3, then run with PYTHONPATH=/tmp/rl/sb3lib")
        return
    torch.set_num_threads(1)  # as the zoo's PPO and SB3's own rl-zoo scripts
    r = recipe(a.env)
    norm = VecNormalize(make_vec_env(a.env, n_envs=1, seed=a.seed), gamma=r["gamma"])
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[r["activation"]]
    model = PPO("MlpPolicy", norm, n_steps=r["n_steps"], batch_size=r["batch_size"], n_epochs=r["n_epochs"],
                gamma=r["gamma"], gae_lambda=r["gae_lambda"], clip_range=r["clip_range"], ent_coef=r["ent_coef"],
                vf_coef=r["vf_coef"], max_grad_norm=r["max_grad_norm"], learning_rate=r["learning_rate"],
                policy_kwargs={"net_arch": {"pi": r["net"], "vf": r["vf"]}, "activation_fn": act,
                               "ortho_init": r["ortho_init"], "log_std_init": r["log_std_init"]},
                seed=a.seed, device="cpu", verbose=0)
    if a.log:
        from stable_baselines3.common.logger import configure

        model.set_logger(configure(a.log, ["csv"]))
    evals: list[tuple[int, float]] = []
    every = r["eval_every"] * r["n_steps"]

    class Periodic(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % every == 0:
                evals.append((self.num_timesteps, float(evaluate(model, norm, a.env, a.seed + 10_000).mean())))
            return True

    model.learn(total_timesteps=a.steps, callback=Periodic())
    final = evaluate(model, norm, a.env, a.seed + 20_000)
    print(json.dumps({"impl": "sb3", "env": a.env, "seed": a.seed, "steps": int(model.num_timesteps),
                      "final_eval": float(final.mean()), "final_eval_std": float(final.std()),
                      "best_eval": max([v for _, v in evals] + [float(final.mean())]), "evals": evals}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
