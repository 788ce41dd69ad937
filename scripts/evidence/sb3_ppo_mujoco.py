"""Stable-Baselines3's PPO on a MuJoCo env with rl-baselines3-zoo's recipe: the reference for experiment=rl_hopper,
rl_halfcheetah and rl_walker2d (scripts/evidence/bench_rl.py sb3_mujoco runs it in pairs with the zoo).

    PYTHONPATH=/tmp/rl/sb3lib OMP_NUM_THREADS=1 python scripts/evidence/sb3_ppo_mujoco.py --env Hopper-v5 --steps 100000
    PYTHONPATH=/tmp/rl/sb3lib python scripts/evidence/sb3_ppo_mujoco.py --check    # zoo vs SB3, same data

`--check` trains nothing: it collects one rollout with SB3 (VecNormalize, episodes cut at 40 steps so that time-limit
truncations happen) and one with the zoo's Collector on the same env stream, weights and actions, and prints the
largest differences of the normalised observations, rewards (bootstrap included), values, log-probs, GAE advantages
and one minibatch's loss gradients.

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

import common  # noqa: F401 - puts the repository on sys.path (zoo, rl)
import numpy as np

PRESETS = {"Hopper-v5": "rl_hopper", "HalfCheetah-v5": "rl_halfcheetah", "Walker2d-v5": "rl_walker2d"}


def recipe(env_id: str, preset: str | None = None) -> dict:
    """The preset's module keys as composed for `env_id` (its own values over the task's defaults), turned back into
    SB3's names. `anneal_lr` becomes SB3's linear schedule to 0 and `clip_vloss` its `clip_range_vf` (SB3 clips the
    value prediction and takes the clipped loss alone, CleanRL and the zoo the larger of the two losses)."""
    from omegaconf import OmegaConf

    from zoo.core.config import compose, register_resolvers

    register_resolvers()
    cfg = compose([f"experiment={preset or PRESETS[env_id]}", f"task.env.id={env_id}"])
    m = OmegaConf.to_container(cfg.task.module, resolve=True)
    hidden = m["hidden_sizes"]
    lr = float(m["optimizer"]["lr"])
    return {"n_steps": m["num_steps"], "batch_size": m["num_steps"] // m["num_minibatches"],
            "n_epochs": m["update_epochs"], "gamma": m["gamma"], "gae_lambda": m["gae_lambda"],
            "clip_range": m["clip_coef"], "clip_range_vf": m["clip_coef"] if m["clip_vloss"] else None,
            "ent_coef": m["ent_coef"], "vf_coef": m["vf_coef"] / 2, "max_grad_norm": m["max_grad_norm"],
            "learning_rate": (lambda remaining: remaining * lr) if m["anneal_lr"] else lr,
            "net": m["pi_hidden_sizes"] or hidden, "vf": m["vf_hidden_sizes"] or hidden,
            "activation": m["activation"], "ortho_init": m["ortho_init"], "log_std_init": m["log_std_init"],
            "eval_every": m["eval_every"]}


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


def sb3_model(env_id: str, seed: int, r: dict, env_kwargs: dict | None = None):  # noqa: ANN201
    """SB3's PPO on VecNormalize (observations and rewards, the recipe's gamma) with the recipe `r`."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    norm = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed, env_kwargs=env_kwargs), gamma=r["gamma"])
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[r["activation"]]
    model = PPO("MlpPolicy", norm, n_steps=r["n_steps"], batch_size=r["batch_size"], n_epochs=r["n_epochs"],
                gamma=r["gamma"], gae_lambda=r["gae_lambda"], clip_range=r["clip_range"],
                clip_range_vf=r["clip_range_vf"], ent_coef=r["ent_coef"], vf_coef=r["vf_coef"],
                max_grad_norm=r["max_grad_norm"], learning_rate=r["learning_rate"],
                policy_kwargs={"net_arch": {"pi": r["net"], "vf": r["vf"]}, "activation_fn": act,
                               "ortho_init": r["ortho_init"], "log_std_init": r["log_std_init"]},
                seed=seed, device="cpu", verbose=0)
    return model, norm


def copy_weights(policy, agent) -> None:  # noqa: ANN001
    """SB3's ActorCriticPolicy (separate pi/vf MLPs) -> the zoo's MLPAgent, layer by layer."""
    import torch

    pairs = [(policy.mlp_extractor.policy_net, agent.actor), (policy.mlp_extractor.value_net, agent.critic)]
    with torch.no_grad():
        for sb3_net, zoo_net in pairs:
            sb3_lin = [m for m in sb3_net if isinstance(m, torch.nn.Linear)]
            zoo_lin = [m for m in zoo_net if isinstance(m, torch.nn.Linear)]
            for src, dst in zip(sb3_lin, zoo_lin[:-1], strict=True):
                dst.load_state_dict(src.state_dict())
        agent.actor[-1].load_state_dict(policy.action_net.state_dict())
        agent.critic[-1].load_state_dict(policy.value_net.state_dict())
        agent.head.log_std.copy_(policy.log_std)


class Replay:
    """The zoo agent with SB3's weights, acting with the actions SB3 took (so both step the same env stream)."""

    def __init__(self, agent, actions) -> None:  # noqa: ANN001
        self.agent, self.actions, self.t = agent, actions, 0

    def act(self, obs):  # noqa: ANN001, ANN201
        import torch

        action = torch.as_tensor(self.actions[self.t], dtype=torch.float32)
        self.t += 1
        logp, _, value = self.agent.evaluate(obs, action)
        return action, logp.detach(), value.detach()

    def value(self, obs):  # noqa: ANN001, ANN201
        return self.agent.value(obs).detach()


def parity(env_id: str, seed: int, r: dict, limit: int = 40) -> dict:
    """One rollout of SB3 (PPO.collect_rollouts on VecNormalize, episodes cut at `limit` steps so that time-limit
    truncations happen) and the zoo's Collector on the same env stream with the same weights and actions: the
    normalised observations, the rewards (truncation bootstrap included), values, log-probs, GAE advantages, and one
    minibatch's loss gradients. Returns the largest absolute differences."""
    import torch

    from zoo.rl import ppo
    from zoo.rl.envs import describe_env, prepare_mujoco
    from zoo.rl.models import build_agent
    from zoo.rl.rollout import Collector

    prepare_mujoco()  # MuJoCo's deprecation warnings to the log, not a MUJOCO_LOG.TXT in the working folder
    model, _ = sb3_model(env_id, seed, r)
    model.learn(3 * r["n_steps"])  # weights away from their initialisation
    model.set_env(sb3_model(env_id, seed, r, {"max_episode_steps": limit})[1])
    _, callback = model._setup_learn(r["n_steps"], None)  # resets the env (fresh VecNormalize statistics)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, r["n_steps"])
    buf = model.rollout_buffer  # (T, 1, ...) numpy, SB3's advantages and returns computed
    spec = describe_env(env_id)
    agent = build_agent("mlp", spec, None, r["activation"], r["net"], r["vf"], r["ortho_init"], r["log_std_init"])
    copy_weights(model.policy, agent)
    env = {"id": env_id, "num_envs": 1, "vectorization": "sync", "kwargs": {"max_episode_steps": limit},
           "normalize_obs": True, "normalize_reward": True, "clip_obs": 10.0, "clip_reward": 10.0,
           "reward_sign": False}
    collector = Collector(env, spec, r["gamma"])
    collector.start(seed=seed)
    roll = collector.collect(Replay(agent, buf.actions), r["n_steps"])
    collector.close()
    adv, _ = ppo.gae(roll.rewards, roll.values, roll.dones, roll.next_value, roll.next_done, r["gamma"],
                     r["gae_lambda"])
    diff = {k: float(np.abs(np.asarray(z, dtype=np.float64).reshape(-1) - getattr(buf, b).reshape(-1)).max())
            for k, z, b in (("obs", roll.obs, "observations"), ("rewards", roll.rewards, "rewards"),
                            ("values", roll.values, "values"), ("log_probs", roll.logp, "log_probs"),
                            ("advantages", adv, "advantages"))}
    i = slice(0, r["batch_size"])  # one minibatch, the loss of each side and its gradients
    obs, act = (torch.as_tensor(x[i, 0]).float() for x in (buf.observations, buf.actions))
    old_logp, a = torch.as_tensor(buf.log_probs[i, 0]), torch.as_tensor(buf.advantages[i, 0])
    ret = torch.as_tensor(buf.returns[i, 0])
    values, logp, ent = model.policy.evaluate_actions(obs, act)
    an = (a - a.mean()) / (a.std() + 1e-8)
    ratio = torch.exp(logp - old_logp)
    pg = -torch.min(an * ratio, an * ratio.clamp(1 - r["clip_range"], 1 + r["clip_range"])).mean()
    loss = pg - r["ent_coef"] * ent.mean() + r["vf_coef"] * torch.nn.functional.mse_loss(ret, values.flatten())
    model.policy.optimizer.zero_grad()
    loss.backward()
    new_logp, new_ent, new_v = agent.evaluate(obs, act)
    zoo_pg, _, _ = ppo.policy_loss(new_logp, old_logp, ppo.normalize_advantages(a), r["clip_range"])
    zoo_loss = zoo_pg - r["ent_coef"] * new_ent.mean() + 2 * r["vf_coef"] * ppo.value_loss(new_v, None, ret, None)
    agent.zero_grad()
    zoo_loss.backward()
    flat = lambda ps: torch.cat([p.grad.reshape(-1) for p in ps])  # noqa: E731
    sb3_grads = flat([*model.policy.mlp_extractor.policy_net.parameters(), *model.policy.action_net.parameters(),
                      model.policy.log_std, *model.policy.mlp_extractor.value_net.parameters(),
                      *model.policy.value_net.parameters()])
    zoo_grads = flat([*agent.actor.parameters(), agent.head.log_std, *agent.critic.parameters()])
    return {"env": env_id, "steps": r["n_steps"], "episodes_cut_at": limit,
            "truncations": int(sum(1 for ep in model.ep_info_buffer if ep["l"] == limit)),
            "max_abs_diff": diff, "loss": [loss.item(), zoo_loss.item()],
            "grad_max_abs_diff": float((sb3_grads - zoo_grads).abs().max()),
            "grad_max_abs": float(sb3_grads.abs().max())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="Hopper-v5", choices=list(PRESETS))
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--preset", default=None, help="the zoo preset whose recipe SB3 runs (default: the env's rl-zoo "
                    "entry, rl_hopper, rl_halfcheetah or rl_walker2d; rl_mujoco for the PPO paper's)")
    ap.add_argument("--log", default="", help="a folder for SB3's own progress.csv (train/explained_variance, "
                    "train/approx_kl, ... per update), to set beside the zoo's metrics.csv")
    ap.add_argument("--check", action="store_true", help="no training run: the zoo's rollout, GAE and loss "
                    "gradients against SB3's on the same env stream and weights")
    a = ap.parse_args()
    try:
        import torch
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError:
        print("stable-baselines3 is not importable; pip install --target /tmp/rl/sb3lib --no-deps "
              "stable-baselines3, then run with PYTHONPATH=/tmp/rl/sb3lib")
        return
    torch.set_num_threads(1)  # as the zoo's PPO and SB3's own rl-zoo scripts
    r = recipe(a.env, a.preset)
    from zoo.rl.envs import prepare_mujoco

    prepare_mujoco()  # MuJoCo's deprecation warnings to the log, not a MUJOCO_LOG.TXT in the working folder
    if a.check:
        print(json.dumps(parity(a.env, a.seed, r)), flush=True)
        return
    model, norm = sb3_model(a.env, a.seed, r)
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
    print(json.dumps({"impl": "sb3", "env": a.env, "preset": a.preset or PRESETS[a.env], "seed": a.seed,
                      "steps": int(model.num_timesteps),
                      "final_eval": float(final.mean()), "final_eval_std": float(final.std()),
                      "best_eval": max([v for _, v in evals] + [float(final.mean())]), "evals": evals}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
