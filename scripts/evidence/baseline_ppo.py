"""A plain single-file PPO (CleanRL style, no Lightning, no zoo) as the speed baseline for rl/ppo.

    python scripts/evidence/baseline_ppo.py --env-id CartPole-v1 --total-timesteps 100000 --seed 1

Same settings as the zoo's default task: 4 sync envs x 128 steps, 4 epochs of 4 minibatches, GAE, clipped
surrogate and value loss, entropy bonus, advantage normalisation, lr annealing, grad-norm clipping, orthogonal init.
Prints one JSON line: steps, seconds, steps/s, and the mean return of the last 20 episodes.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


def layer(i: int, o: int, gain: float = 2**0.5) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    gamma, lam, clip, ent_coef, vf_coef, lr, epochs, n_mb = 0.99, 0.95, 0.2, 0.01, 0.5, 2.5e-4, 4, 4

    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv(
        [lambda: gym.make(a.env_id) for _ in range(a.num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    obs_dim, n_act = envs.single_observation_space.shape[0], envs.single_action_space.n
    actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_act, 0.01))
    critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
    params = list(actor.parameters()) + list(critic.parameters())
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5)

    T, N = a.num_steps, a.num_envs
    batch, mb = T * N, T * N // n_mb
    updates = a.total_timesteps // batch
    obs_b = torch.zeros(T, N, obs_dim)
    act_b, logp_b, rew_b, done_b, val_b = (torch.zeros(T, N) for _ in range(5))
    recent: deque[float] = deque(maxlen=20)
    next_obs = torch.as_tensor(envs.reset(seed=a.seed)[0], dtype=torch.float32)
    next_done = torch.zeros(N)
    start = time.perf_counter()
    for update in range(updates):
        opt.param_groups[0]["lr"] = lr * (1 - update / updates)
        for t in range(T):
            obs_b[t], done_b[t] = next_obs, next_done
            with torch.no_grad():
                d = Categorical(logits=actor(next_obs))
                action = d.sample()
                logp_b[t], val_b[t] = d.log_prob(action), critic(next_obs).squeeze(-1)
            act_b[t] = action
            o, r, term, trunc, info = envs.step(action.numpy())
            rew_b[t] = torch.as_tensor(r, dtype=torch.float32)
            next_obs = torch.as_tensor(o, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(term, trunc), dtype=torch.float32)
            if "_episode" in info:
                recent.extend(info["episode"]["r"][info["_episode"]].tolist())
        with torch.no_grad():
            next_v = critic(next_obs).squeeze(-1)
            adv = torch.zeros(T, N)
            last = torch.zeros(N)
            for t in reversed(range(T)):
                nonterm = 1 - (next_done if t == T - 1 else done_b[t + 1])
                nv = next_v if t == T - 1 else val_b[t + 1]
                delta = rew_b[t] + gamma * nv * nonterm - val_b[t]
                last = delta + gamma * lam * nonterm * last
                adv[t] = last
            ret = adv + val_b
        bo, ba, bl = obs_b.reshape(batch, obs_dim), act_b.reshape(batch).long(), logp_b.reshape(batch)
        badv, bret, bv = adv.reshape(batch), ret.reshape(batch), val_b.reshape(batch)
        for _ in range(epochs):
            perm = torch.randperm(batch)
            for s in range(0, batch, mb):
                i = perm[s:s + mb]
                d = Categorical(logits=actor(bo[i]))
                ratio = (d.log_prob(ba[i]) - bl[i]).exp()
                ad = (badv[i] - badv[i].mean()) / (badv[i].std() + 1e-8)
                pg = torch.max(-ad * ratio, -ad * ratio.clamp(1 - clip, 1 + clip)).mean()
                v = critic(bo[i]).squeeze(-1)
                vc = bv[i] + (v - bv[i]).clamp(-clip, clip)
                vl = 0.5 * torch.max((v - bret[i]) ** 2, (vc - bret[i]) ** 2).mean()
                loss = pg - ent_coef * d.entropy().mean() + vf_coef * vl
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                opt.step()
    seconds = time.perf_counter() - start
    steps = updates * batch
    print(json.dumps({"impl": "baseline", "env": a.env_id, "seed": a.seed, "steps": steps,
                      "seconds": round(seconds, 2), "steps_per_sec": round(steps / seconds, 1),
                      "return_last20": float(np.mean(recent)) if recent else None}))
    envs.close()


if __name__ == "__main__":
    main()
