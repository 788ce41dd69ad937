"""Stable-Baselines3 PPO on CartPole-v1 with rl-baselines3-zoo's hyper-parameters: the reference that
`python -m zoo train experiment=rl_cartpole` is timed against (bench_rl.py sb3 runs both in turn).

    PYTHONPATH=/tmp/sb3lib python scripts/evidence/bench_sb3_cartpole.py --seed 1

SB3 is not a zoo dependency. Install it outside the project, without a second torch:
    .venv/bin/pip install --target /tmp/sb3lib --no-deps stable-baselines3
(cloudpickle, pandas and matplotlib, which it imports, are already in the zoo's venv). Without SB3 the script prints
one line and exits 0.

rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1: 8 envs x 32 steps, batch 256, 20 epochs, gamma 0.98,
gae_lambda 0.8, ent_coef 0, learning rate lin_0.001 and clip range lin_0.2 (both annealed linearly to 0), 1e5 steps.
Prints one JSON line: env steps at which the mean return of the last 20 finished episodes first reached 475, the
final deterministic evaluation over 10 episodes, and the wall time from process start to the end of evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque

START = time.perf_counter()  # before the heavy imports (SB3, torch: in main): start to end, as a user would time it


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--eval-episodes", type=int, default=10)
    a = p.parse_args()
    try:
        import stable_baselines3 as sb3
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.evaluation import evaluate_policy
    except ImportError as e:
        print(f"stable-baselines3 is not importable ({e}); install it outside the project: .venv/bin/pip install "
              "--target /tmp/sb3lib --no-deps stable-baselines3, then run with PYTHONPATH=/tmp/sb3lib")
        sys.exit(0)
    import torch

    torch.set_num_threads(1)  # what SB3's own scripts do for MLP policies on CPU (and the zoo's torch_threads=1)

    class Last20(BaseCallback):
        """First env step at which the mean return of the last 20 finished episodes reaches the threshold."""

        def __init__(self) -> None:
            super().__init__()
            self.recent: deque[float] = deque(maxlen=20)
            self.hit: int | None = None

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # added by the Monitor wrapper that make_vec_env puts on each env
                    self.recent.append(float(info["episode"]["r"]))
                    if self.hit is None and len(self.recent) == 20 and sum(self.recent) / 20 >= a.threshold:
                        self.hit = self.num_timesteps
            return True

    def linear(v: float):  # noqa: ANN202 - rl-zoo's lin_<v>: v * remaining progress (1 -> 0)
        return lambda progress_remaining: progress_remaining * v

    env = make_vec_env("CartPole-v1", n_envs=8, seed=a.seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=a.seed, device="cpu",
                verbose=0)
    cb = Last20()
    t0 = time.perf_counter()
    model.learn(total_timesteps=a.total_timesteps, callback=cb)
    train_s = time.perf_counter() - t0
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=a.seed + 10_000)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=a.eval_episodes, deterministic=True)
    print(json.dumps({"impl": "sb3", "version": sb3.__version__, "seed": a.seed, "steps": model.num_timesteps,
                      "steps_to_475": cb.hit, "final_last20": sum(cb.recent) / max(1, len(cb.recent)),
                      "final_eval": float(mean), "final_eval_std": float(std), "train_s": round(train_s, 1),
                      "wall_s": round(time.perf_counter() - START, 1)}))


if __name__ == "__main__":
    main()
