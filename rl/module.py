"""PPO as a LightningModule with manual optimisation, inside the zoo's shared Trainer.

One training "batch" is one PPO update: collect `num_envs * num_steps` transitions on CPU, compute GAE, then
`update_epochs` passes of `num_minibatches` minibatches. An epoch is `eval_every` updates followed by a
deterministic evaluation (`val/return`, the monitored metric). Training stops after `total_timesteps` global
environment steps (all DDP ranks together), so the task sets `trainer.max_epochs: -1`.
"""

from __future__ import annotations

import copy
import gc
import time
import warnings
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, IterableDataset

from zoo.errors import ZooError
from zoo.kit import tb
from zoo.kit.optim import require_optimizer
from zoo.rl import ppo
from zoo.rl.envs import describe_env
from zoo.rl.evaluate import record_episode, run_episodes
from zoo.rl.models import build_agent
from zoo.rl.rollout import Batch, Collector

# Ticks has a length on purpose (Lightning sizes the epoch from it); it is never split across loader workers.
warnings.filterwarnings("ignore", message=r"Your `IterableDataset` has `__len__` defined")

ENV_DEFAULTS = {"id": "CartPole-v1", "num_envs": 4, "vectorization": "sync", "kwargs": {},
                "normalize_obs": False, "normalize_reward": False, "clip_obs": 10.0, "clip_reward": 10.0,
                "reward_sign": False, "action_type": None}
ACTION_TYPES = {"discrete": "Discrete", "box": "continuous (Box)"}


class Ticks(IterableDataset):
    """n items (0..n-1). Iterable, so Lightning adds no DistributedSampler: every DDP rank gets all n ticks."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):  # noqa: ANN204
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


class PPO(LightningModule):
    def __init__(self, env: dict | None = None, arch: str = "mlp", hidden_sizes: tuple[int, ...] | list[int] = (64, 64),
                 activation: str = "tanh", pi_hidden_sizes: list[int] | None = None,
                 vf_hidden_sizes: list[int] | None = None, ortho_init: bool = True, log_std_init: float = 0.0,
                 total_timesteps: int = 100_000, num_steps: int = 128,
                 num_minibatches: int = 4, update_epochs: int = 4, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip_coef: float = 0.2, clip_vloss: bool = True, ent_coef: float = 0.01, vf_coef: float = 0.5,
                 max_grad_norm: float = 0.5, target_kl: float | None = None, norm_adv: bool = True,
                 anneal_lr: bool = True, bootstrap_truncated: bool = True, eval_every: int = 20,
                 eval_episodes: int = 10, video: bool = True, rollout_on_cpu: bool = True,
                 torch_threads: int | None = 1, pretrained: str | bool | None = None, seed: int = 0,
                 optimizer: Any = None, scheduler: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.automatic_optimization = False
        unknown = set(env or {}) - set(ENV_DEFAULTS)
        if unknown:
            raise ZooError(f"unknown task.env keys {sorted(unknown)}; known: {', '.join(ENV_DEFAULTS)}")
        self.env_cfg = {**ENV_DEFAULTS, **(env or {})}
        self._check_hparams()
        self.spec = describe_env(self.env_cfg["id"], self.env_cfg["kwargs"])  # fails early on bad ids/spaces
        _check_action_type(self.env_cfg, self.spec)
        self.agent = build_agent(arch, self.spec, hidden_sizes and list(hidden_sizes), activation, pi_hidden_sizes,
                                 vf_hidden_sizes, ortho_init, log_std_init)
        self.collector = Collector(self.env_cfg, self.spec, gamma, bootstrap_truncated)
        self.update = 0  # PPO updates done (checkpointed)
        self.world = 1
        # Fine-tuning from another run (rl/pretrained.py: same observations, any action space); a new run with its
        # own optimiser, schedule and step count. The zoo saves `pretrained` as False in every checkpoint, and a
        # resumed run does not read it (its checkpoint restores every tensor).
        from zoo.kit.pretrained import unless_resuming
        from zoo.rl.pretrained import load_pretrained

        self.pretrained_report = unless_resuming(lambda: load_pretrained(self, pretrained))

    def _check_hparams(self) -> None:
        h, n = self.hparams, self.env_cfg["num_envs"]
        batch = n * h.num_steps
        if h.num_steps < 1 or h.num_minibatches < 1 or h.update_epochs < 1 or n < 1:
            raise ZooError("task.env.num_envs, num_steps, num_minibatches and update_epochs must all be >= 1")
        if batch % h.num_minibatches:
            raise ZooError(f"num_envs * num_steps = {n} * {h.num_steps} = {batch} does not split into "
                           f"{h.num_minibatches} equal minibatches; pick num_minibatches dividing {batch}")
        if h.total_timesteps < batch:
            raise ZooError(f"total_timesteps={h.total_timesteps} is less than one rollout ({batch} steps); "
                           "raise it or lower num_envs/num_steps")
        if not (0 < h.gamma <= 1 and 0 <= h.gae_lambda <= 1):
            raise ZooError(f"gamma must be in (0, 1] and gae_lambda in [0, 1], got {h.gamma}, {h.gae_lambda}")
        if h.eval_every < 1 or h.eval_episodes < 1:
            raise ZooError("eval_every and eval_episodes must be >= 1")

    @property
    def batch_size(self) -> int:
        return self.env_cfg["num_envs"] * self.hparams.num_steps

    @property
    def num_updates(self) -> int:
        return max(1, self.hparams.total_timesteps // (self.batch_size * self.world))

    @property
    def env_steps(self) -> int:
        """Global environment steps: every rank steps its own envs."""
        return self.update * self.batch_size * self.world

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for already-processed observations (B, *obs_shape)."""
        return self.agent.action(obs, deterministic=True)

    # ------------------------------------------------------------------------------------------------ loops
    def setup(self, stage: str) -> None:
        self.world = self.trainer.world_size if self._trainer is not None else 1
        if self.hparams.torch_threads:
            # Batches of 4-512 rows: intra-op threads cost more in hand-offs than they win (10x slower rollouts
            # with 2 threads on a busy 2-core machine); SB3 sets 1 thread for the same reason.
            torch.set_num_threads(self.hparams.torch_threads)

    def train_dataloader(self) -> DataLoader:
        """Ticks: one item per PPO update of the coming epoch (the data comes from the envs)."""
        remaining = self.num_updates - self.update
        return DataLoader(Ticks(max(1, min(self.hparams.eval_every, remaining))), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Ticks(1), batch_size=None)  # one step that plays eval_episodes episodes per rank

    def test_dataloader(self) -> DataLoader:
        return DataLoader(Ticks(1), batch_size=None)

    def on_train_start(self) -> None:
        freeze_imports()
        # Every rank its own env seeds; a resumed run starts fresh episodes with new (reproducible) seeds.
        rank = self.global_rank
        self.collector.start(seed=self.hparams.seed + 1000 * rank + 7919 * self.update)
        self._t0, self._steps0, self._eval_s = time.perf_counter(), self.env_steps, 0.0

    def _rollout_agent(self) -> torch.nn.Module:
        if self.device.type == "cpu" or not self.hparams.rollout_on_cpu:
            return self.agent
        if not hasattr(self, "_cpu_agent"):
            self._cpu_agent = copy.deepcopy(self.agent).cpu()
        self._cpu_agent.load_state_dict(self.agent.state_dict())
        return self._cpu_agent

    def training_step(self, batch: Any, batch_idx: int) -> None:
        if self.update >= self.num_updates:
            return None
        h = self.hparams
        opt = self.optimizers()
        self._set_lr(opt)
        roll = self.collector.collect(self._rollout_agent(), h.num_steps)
        if self.collector.obs_rms is not None and self.world > 1:
            from zoo.rl.normalize import sync_running_stats

            sync_running_stats(self.collector.obs_rms, lambda t: self.trainer.strategy.reduce(t, reduce_op="mean"))
        stats = self._learn(opt, roll)
        self.update += 1
        sch = self.lr_schedulers()
        if sch is not None:
            sch.step()
        self._log_update(stats, roll)
        return None

    def _set_lr(self, opt: Any) -> None:
        if self.hparams.anneal_lr and self.scheduler_factory is None:
            frac = ppo.linear_anneal(self.update, self.num_updates)
            for g in opt.optimizer.param_groups:
                g["lr"] = frac * g["initial_lr"]

    def _learn(self, opt: Any, roll: Batch) -> dict[str, float]:
        h, dev = self.hparams, self.device
        adv, ret = ppo.gae(roll.rewards, roll.values, roll.dones, roll.next_value, roll.next_done,
                           h.gamma, h.gae_lambda)
        n = self.batch_size
        b_obs = roll.obs.reshape(n, *roll.obs.shape[2:]).to(dev)
        b_act = roll.actions.reshape(n, *roll.actions.shape[2:]).to(dev)
        b_logp, b_val = roll.logp.reshape(n).to(dev), roll.values.reshape(n).to(dev)
        b_adv, b_ret = adv.reshape(n).to(dev), ret.reshape(n).to(dev)
        mb = n // h.num_minibatches
        # One minibatch (rl_cartpole: 20 epochs over the whole 256-sample batch): the losses are means, so the
        # shuffle and the gathers change nothing; skip them and normalise the advantages once.
        whole = h.num_minibatches == 1
        if whole and h.norm_adv:
            b_adv = ppo.normalize_advantages(b_adv)
        # Per-minibatch statistics, reported as SB3 does: losses, entropy and clip fraction averaged over every
        # minibatch of the update, approx_kl over the last epoch's (one minibatch of 32 rows is too noisy to read).
        clipfracs, pg_losses, v_losses, ents, kls = [], [], [], [], []
        for _ in range(h.update_epochs):
            kls = []
            perm = None if whole else torch.randperm(n, device=dev)
            for start in range(0, n, mb):
                i = slice(None) if perm is None else perm[start:start + mb]
                new_logp, entropy, new_v = self.agent.evaluate(b_obs[i], b_act[i])
                a = ppo.normalize_advantages(b_adv[i]) if h.norm_adv and not whole else b_adv[i]
                pg_loss, kl, clipfrac = ppo.policy_loss(new_logp, b_logp[i], a, h.clip_coef)
                v_loss = ppo.value_loss(new_v, b_val[i], b_ret[i], h.clip_coef if h.clip_vloss else None)
                ent = entropy.mean()
                loss = pg_loss - h.ent_coef * ent + h.vf_coef * v_loss
                opt.zero_grad()
                self.manual_backward(loss)  # DDP averages the gradients here
                if h.max_grad_norm:
                    self.clip_gradients(opt, gradient_clip_val=h.max_grad_norm, gradient_clip_algorithm="norm")
                opt.step()
                clipfracs.append(clipfrac)
                kls.append(kl)
                pg_losses.append(pg_loss.detach())
                v_losses.append(v_loss.detach())
                ents.append(ent.detach())
            if h.target_kl is not None:
                # Every rank must take the same decision, or DDP would wait forever for the others' gradients.
                if float(self.trainer.strategy.reduce(kl.detach(), reduce_op="mean")) > h.target_kl:
                    break
        mean = lambda xs: float(torch.stack(xs).mean())  # noqa: E731
        return {"policy_loss": mean(pg_losses), "value_loss": mean(v_losses), "entropy": mean(ents),
                "approx_kl": mean(kls), "clip_fraction": mean(clipfracs),
                "explained_variance": ppo.explained_variance(b_val.cpu(), b_ret.cpu())}

    def _log_update(self, stats: dict[str, float], roll: Batch) -> None:
        """Per-update scalars go straight to the loggers: `self.log` costs ~1 ms per key in Lightning's result
        bookkeeping, which was 12% of a CartPole update. Nothing monitors them; `val/return` still goes through
        `self.log` for checkpointing and early stopping."""
        last20 = float(np.mean(self.collector.recent)) if self.collector.recent else None
        if last20 is not None and self.trainer.progress_bar_callback is not None:
            self.log("rollout/return_last20", last20, prog_bar=True, logger=False, on_step=True, on_epoch=False,
                     batch_size=1, rank_zero_only=True)
        every = max(1, self.trainer.log_every_n_steps)
        if self.global_rank != 0 or not self.loggers or (self.update % every and self.update < self.num_updates):
            return
        out = {f"train/{k}": v for k, v in stats.items()}
        out["train/lr"] = self.optimizers().optimizer.param_groups[0]["lr"]
        out["train/env_steps"] = float(self.env_steps)
        # Wall clock of the training loop (Lightning's overhead included) without the evaluations: what a plain
        # PPO script measures. train/time is the wall clock since the start, evaluations included.
        wall = time.perf_counter() - self._t0
        out["train/steps_per_sec"] = (self.env_steps - self._steps0) / max(wall - self._eval_s, 1e-9)
        out["train/time"] = wall
        if roll.episode_returns:
            out["rollout/return"] = float(np.mean(roll.episode_returns))
            out["rollout/length"] = float(np.mean(roll.episode_lengths))
        if last20 is not None:
            out["rollout/return_last20"] = last20
        for logger in self.loggers:
            logger.log_metrics(out, step=self.trainer.global_step)

    def on_train_epoch_end(self) -> None:
        if self.update >= self.num_updates:
            self.trainer.should_stop = True

    def _evaluate(self, stage: str, seed: int) -> None:
        t0 = time.perf_counter()
        policy = self.collector.policy(self.agent, deterministic=True)
        returns, lengths = run_episodes(policy, self.env_cfg["id"], self.hparams.eval_episodes,
                                        seed + 1000 * self.global_rank, self.env_cfg["kwargs"])
        metrics = {f"{stage}/return": float(returns.mean()), f"{stage}/return_std": float(returns.std()),
                   f"{stage}/length": float(lengths.mean()), f"{stage}/env_steps": float(self.env_steps)}
        self.log(f"{stage}/return", metrics.pop(f"{stage}/return"), prog_bar=True, batch_size=1, sync_dist=True)
        self.log_dict(metrics, batch_size=1, sync_dist=True)
        self._eval_s = getattr(self, "_eval_s", 0.0) + time.perf_counter() - t0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate("val", self.hparams.seed + 10_000)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate("test", self.hparams.seed + 20_000)

    def on_train_end(self) -> None:
        self.collector.close()
        if self.world > 1:
            self._check_ranks_agree()
        if self.hparams.video and self.global_rank == 0:
            # Every other step, 10 s of play at 15 fps: rendering is most of the video's cost (1.3 s for 300
            # CartPole frames, with the GIF encoding).
            frames, _ = record_episode(self.collector.policy(self.agent), self.env_cfg["id"],
                                       self.hparams.seed + 30_000, self.env_cfg["kwargs"], max_frames=150, every=2)
            if frames is not None:  # TensorBoard keeps every frame: halve the large ones (CartPole's 600x400)
                step = 2 if frames.shape[2] > 300 else 1
                tb.log_video(self, "val/video", torch.from_numpy(frames[:, ::step, ::step].copy()), fps=15)

    def _check_ranks_agree(self) -> None:
        """All ranks must hold the same weights after training (averaged gradients, same decisions)."""
        from torch.distributed import ReduceOp

        flat = torch.cat([p.detach().reshape(-1) for p in self.agent.parameters()]).double()
        reduce = self.trainer.strategy.reduce
        highest = reduce(flat.clone(), reduce_op=ReduceOp.MAX)
        lowest = reduce(flat.clone(), reduce_op=ReduceOp.MIN)
        spread = float((highest - lowest).max())
        if spread > 1e-5:
            raise RuntimeError(f"DDP ranks diverged (max weight difference {spread:.3g})")

    def teardown(self, stage: str) -> None:
        self.collector.close()

    # ------------------------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rl"] = {"update": self.update, "env_id": self.env_cfg["id"], "spec": self.spec,
                            "normalization": self.collector.state_dict(), "torch_rng": torch.get_rng_state()}
        # A batch is a tick that collects a fresh rollout, not a slice of a dataset: a resume mid-epoch runs exactly
        # the updates left (the resume line must not speak of reshuffled examples).
        checkpoint["batches_are_examples"] = False

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("rl")
        if state is None:
            raise ZooError("checkpoint has no PPO state (checkpoint['rl']); it was not written by rl/ppo")
        if state["env_id"] != self.env_cfg["id"] or state["spec"] != self.spec:
            raise ZooError(f"checkpoint is for {state['env_id']} (spaces {_spaces(state['spec'])}), this run is "
                           f"for {self.env_cfg['id']} ({_spaces(self.spec)}); set task.env.id={state['env_id']} "
                           "or start a new run without ckpt_path")
        self.update = int(state["update"])
        self.collector.load_state_dict(state["normalization"])
        if self._trainer is not None and self.trainer.state.fn == "fit":
            torch.set_rng_state(state["torch_rng"])  # resume draws the same actions an uninterrupted run would

    def configure_optimizers(self) -> Any:
        require_optimizer(self)
        kwargs = {}
        if getattr(self.optimizer_factory, "keywords", {}).get("fused") and "32" not in str(self.trainer.precision):
            # A fused optimizer unscales inside its step, so Lightning's mixed precision refuses to clip its
            # gradients ("does not allow for gradient clipping"): the per-tensor kernels under AMP.
            kwargs["fused"] = False
        opt = self.optimizer_factory(self.agent.parameters(), **kwargs)
        for g in opt.param_groups:
            g.setdefault("initial_lr", g["lr"])  # the annealing base, kept in the optimizer's state on resume
        if self.scheduler_factory is None:
            return opt
        scheduler = self.scheduler_factory(opt, total_steps=self.num_updates)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def freeze_imports() -> None:
    """Move what exists now (~500k objects: torch, Lightning, gymnasium, Hydra) out of the cyclic GC's reach, once
    per process. They live until exit, so walking them again is wasted work: the GC's walks of them at interpreter
    exit cost a CartPole run 1 to 4 s (docs/rl.md). Later objects (a second run in the same process included) are
    collected as usual."""
    if not gc.get_freeze_count():
        gc.freeze()


def _check_action_type(env: dict, spec: dict) -> None:
    """A preset written for one kind of action (`task.env.action_type`) refuses an env with the other kind: its
    hyper-parameters (entropy, log-std, clip range) would be silently wrong there."""
    want, got = env.get("action_type"), spec["action"]["type"]
    if want is None:
        return
    if want not in ACTION_TYPES:
        raise ZooError(f"task.env.action_type must be discrete, box or null, got '{want}'")
    if want != got:
        hint = ("experiment=rl_cartpole or rl_acrobot" if got == "discrete"
                else "experiment=rl_pendulum, rl_hopper, rl_halfcheetah or rl_walker2d")
        raise ZooError(f"this recipe is for {ACTION_TYPES[want]} actions but {env['id']} has {ACTION_TYPES[got]} "
                       f"actions; use a recipe for them ({hint}) or task=rl/ppo task.env.id={env['id']}")


def _spaces(spec: dict) -> str:
    a = spec["action"]
    act = f"Discrete({a['n']})" if a["type"] == "discrete" else f"Box{tuple(a['shape'])}"
    return f"obs {tuple(spec['obs_shape'])}, action {act}"
