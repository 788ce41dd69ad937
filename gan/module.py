"""DCGAN LightningModule: two optimisers by manual optimisation inside the zoo's shared trainer.

Per training batch: one discriminator (critic) step; every `n_critic`-th batch also one generator step on the same
fakes, then the EMA generator follows (gan/speed.py: what keeps these steps to few kernel launches). Validation
compares EMA-generator samples with the val split in an evaluator's features (Fréchet distance, the monitored
`val/fd`) and, for labelled data, the classes the evaluator sees in them.
Test adds the real-vs-real floor at the same sample count.

Note: in manual optimisation Lightning counts every optimizer.step() in `global_step`, so `trainer.max_steps`
counts D and G steps together (2 per batch with n_critic=1).
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L
import torch

from zoo.errors import ZooError
from zoo.gan import losses
from zoo.gan.evaluator import Judge, build_judge
from zoo.gan.models import SIZES, build, list_models
from zoo.gan.speed import ema_update_
from zoo.kit import tb
from zoo.kit.optim import build_optimizer, require_optimizer


class DCGAN(L.LightningModule):
    def __init__(
        self,
        arch: str = "dcgan_small",
        nz: int = 100,
        width: int | None = None,
        loss: str = "nonsat",
        spectral_norm: bool = False,
        conditional: bool = False,
        n_critic: int = 1,
        gp_weight: float = 10.0,
        d_lr_scale: float = 1.0,
        ema_decay: float = 0.999,
        eval_classifier: str | None = None,
        eval_samples: int | None = None,
        eval_train_steps: int = 500,
        inception_fid: bool = False,
        num_fixed: int = 64,
        compile_mode: str | None = None,
        channels: int = 1,
        image_size: int = 32,
        num_classes: int = 0,
        class_names: list[str] | None = None,
        pretrained: str | bool | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
    ) -> None:
        super().__init__()
        # compile_mode: only so that checkpoints saved before torch.compile became trainer.compile_mode still load
        self.save_hyperparameters(ignore=["optimizer", "scheduler", "compile_mode"])
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.automatic_optimization = False
        if arch not in list_models():
            raise ZooError(f"unknown GAN arch {arch!r}; use one of {', '.join(list_models())}")
        if loss not in losses.LOSSES:
            raise ZooError(f"unknown GAN loss {loss!r}; use one of {', '.join(losses.LOSSES)}")
        if image_size not in SIZES:
            raise ZooError(f"image_size {image_size} not supported; use one of {SIZES}")
        if conditional and not num_classes:
            raise ZooError("conditional=true needs labelled data (classes); use a labelled dataset or "
                           "a folder with one sub-folder per class, or set task.module.conditional=false")
        if n_critic < 1:
            raise ZooError(f"n_critic={n_critic} must be >= 1")
        k = num_classes if conditional else 0
        # WGAN-GP penalises per-sample gradients, which batch norm couples; SN-GANs drop batch norm too.
        d_norm = "none" if (loss == "wgan_gp" or spectral_norm) else "batch"
        self.generator, self.discriminator = build(arch, nz, channels, image_size, k, width, d_norm, spectral_norm)
        self.generator_ema = copy.deepcopy(self.generator).requires_grad_(False).eval()
        self.register_buffer("ema_updates", torch.zeros((), dtype=torch.long))
        # the host's copy of ema_updates: reading the buffer every G step would wait for the GPU each time
        self._ema_count: int | None = None
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_ema_count", None))
        gen = torch.Generator().manual_seed(1234)  # fixed noise: the same grid every epoch, saved for resume
        self.register_buffer("fixed_z", torch.randn(num_fixed, nz, generator=gen))
        self.register_buffer("fixed_labels", torch.arange(num_fixed) % max(1, k))
        self.judge: Judge | None = None  # built in setup(): it needs the datamodule's train split
        # Fine-tuning G and D from an earlier run (gan/pretrained.py); the zoo saves `pretrained` as False in every
        # checkpoint, so load_from_checkpoint never reads the source again; nor does a resumed run.
        from zoo.gan.pretrained import load_pretrained
        from zoo.kit.pretrained import unless_resuming

        self.pretrained_report = unless_resuming(lambda: load_pretrained(self, pretrained))

    # ------------------------------------------------------------------------------------------------ sampling
    @property
    def conditional(self) -> bool:
        return bool(self.hparams.conditional)

    def sampler(self) -> torch.nn.Module:
        return self.generator_ema if self.hparams.ema_decay > 0 else self.generator

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Inference: images (B, C, H, W) in [-1, 1] from noise (B, nz), with the EMA generator in eval mode."""
        g = self.sampler()
        was = g.training
        g.eval()
        out = g(z, labels if self.conditional else None)
        g.train(was)
        return out

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, generator: torch.Generator | None = None,
               batch_size: int = 256) -> torch.Tensor:
        """n images (n, C, H, W) in [-1, 1]; conditional models get `labels` (n,) or balanced classes 0..K-1."""
        if self.conditional and labels is None:
            labels = torch.arange(n, device=self.device) % self.hparams.num_classes
        out = []
        for i in range(0, n, batch_size):
            z = torch.randn(min(batch_size, n - i), self.hparams.nz, device=self.device, generator=generator)
            y = labels[i:i + len(z)].to(self.device) if labels is not None else None
            out.append(self(z, y).float())
        return torch.cat(out) if out else torch.empty(0)

    # ------------------------------------------------------------------------------------------------ training
    def _d_output(self, x: torch.Tensor) -> torch.Tensor:
        """What TensorBoard shows as D(x): a probability for the logistic loss, the raw critic value otherwise."""
        return torch.sigmoid(x.float()).mean() if self.hparams.loss == "nonsat" else x.float().mean()

    def discriminator_step(self, real: torch.Tensor, labels: torch.Tensor | None, keep_fake: bool = False,
                           stats: bool = True) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One D step; returns its statistics and the fakes, with G's graph when `keep_fake` (a G step follows and
        reuses them: one G forward per batch instead of two, as in PyTorch's DCGAN example)."""
        hp = self.hparams
        opt_d = self.optimizers()[0]
        with torch.set_grad_enabled(keep_fake):
            # conditional: fakes share the real batch's labels, so GP interpolates within a class
            fake = self.generator(torch.randn(len(real), hp.nz, device=self.device), labels)
        d_real, d_fake = self.discriminator(real, labels), self.discriminator(fake.detach(), labels)
        loss = losses.d_loss(hp.loss, d_real, d_fake)
        out = {"loss_d": loss.detach()}
        if stats:
            out.update(d_real=self._d_output(d_real.detach()), d_fake=self._d_output(d_fake.detach()))
        if hp.loss == "wgan_gp":
            gp = losses.gradient_penalty(lambda x: self.discriminator(x, labels), real, fake.detach())
            loss = loss + hp.gp_weight * gp
            out["gp"] = gp.detach()
        opt_d.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        opt_d.step()
        return out, fake

    def generator_step(self, fake: torch.Tensor, labels: torch.Tensor | None,
                       stats: bool = True) -> dict[str, torch.Tensor]:
        """One G step on the D step's fakes (their graph through G kept), judged by the D just updated."""
        opt_g = self.optimizers()[1]
        with self.toggled_optimizer(opt_g):  # D's parameters need no gradients for this step
            d_fake = self.discriminator(fake, labels)
            loss = losses.g_loss(self.hparams.loss, d_fake)
            opt_g.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            opt_g.step()
        self.update_ema()
        out = {"loss_g": loss.detach()}
        if stats:
            out["d_fake_g"] = self._d_output(d_fake.detach())
        return out

    @torch.no_grad()
    def update_ema(self) -> None:
        """EMA of G's weights with TF-style warm-up (decay (1+t)/(10+t) early on); BN statistics are copied."""
        if self.hparams.ema_decay <= 0:
            return
        if self._ema_count is None:  # once per run, and after every load_state_dict (resume, pretrained)
            self._ema_count = int(self.ema_updates)
        self._ema_count += 1
        t = self._ema_count
        self.ema_updates.fill_(t)
        decay = min(self.hparams.ema_decay, (1 + t) / (10 + t))
        ema_update_(self.generator_ema, self.generator, 1 - decay)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        real, labels = batch
        labels = labels if self.conditional else None
        scheds = self._schedulers()
        g_step = (batch_idx + 1) % self.hparams.n_critic == 0
        log = self._writes_logs()
        stats, fake = self.discriminator_step(real, labels, keep_fake=g_step, stats=log)
        if scheds:
            scheds[0].step()
        if g_step:
            stats.update(self.generator_step(fake, labels, stats=log))
            if scheds:
                scheds[1].step()
        if log:
            self._log_stats(stats, len(real))

    def _writes_logs(self) -> bool:
        """Whether Lightning writes this batch's step metrics (every trainer.log_every_n_steps batches).

        Statistics of the other batches would never be written; computing and logging them is ~30 small ops per
        step, and the progress bar reading them waits for the GPU every batch.
        """
        trainer = self._trainer
        return trainer is None or bool(trainer._logger_connector.should_update_logs or trainer.fast_dev_run)

    def _log_stats(self, stats: dict[str, torch.Tensor], n: int) -> None:
        for key in ("loss_d", "loss_g"):
            if key in stats:
                self.log(f"train/{key}", stats.pop(key), prog_bar=True, batch_size=n)
        self.log_dict({f"train/{k}": v for k, v in stats.items()}, batch_size=n)

    def _schedulers(self) -> list:
        s = self.lr_schedulers()
        return [] if s is None else (s if isinstance(s, list) else [s])

    # ------------------------------------------------------------------------------------------------ evaluation
    def setup(self, stage: str) -> None:
        # a plain attribute (zoo.gan.evaluator.Judge is no nn.Module): kept out of state_dict, DDP and checkpoints
        if stage in ("fit", "validate", "test") and self.judge is None and self._evaluates(stage):
            self.judge = build_judge(self.hparams, self.trainer.datamodule)

    def compiled_networks(self) -> dict[str, torch.nn.Module]:
        """What `trainer.compile` compiles (zoo.core.compile): G and D, which every step calls; the EMA copy only
        samples at evaluation. The gradient penalty differentiates D's gradients again, a double backward that
        torch.compile does not have."""
        if self.hparams.loss == "wgan_gp":
            raise ZooError("trainer.compile=true needs a GAN loss without the gradient penalty (torch.compile has no "
                           "double backward); use task.module.loss=nonsat or hinge, or trainer.compile=false")
        return {"generator": self.generator, "discriminator": self.discriminator}

    def _evaluates(self, stage: str) -> bool:
        """A fit without validation (`zoo bench`, limit_val_batches=0) needs no evaluator: building one can train the
        built-in classifier first, minutes on a CPU. The test stage after such a fit builds it then."""
        return stage != "fit" or self.trainer.limit_val_batches != 0

    def on_validation_epoch_start(self) -> None:
        self.judge.start("val", self.device)

    def on_test_epoch_start(self) -> None:
        self.judge.start("test", self.device)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.judge.update_real("val", batch[0])

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        # loader 0: the val split (reference for G and the floor); 1: an equal-sized train subset (real-vs-real)
        self.judge.update_real("test", batch[0], reference=dataloader_idx == 0)

    def _log_eval(self, stage: str) -> None:
        """Generate as many samples as this rank saw real ones (or eval_samples), judge them, log."""
        n_real = self.judge.real_count(stage)
        n = int(self.hparams.eval_samples or n_real)
        # fixed evaluation noise (per rank): epoch-to-epoch changes in the figure come from G, not from z
        fakes = self.sample(n, generator=torch.Generator(device=self.device).manual_seed(10_000 + self.global_rank))
        labels = torch.arange(n, device=self.device) % self.hparams.num_classes if self.conditional else None
        out = self.judge.score(stage, fakes, labels)
        totals = self.all_gather(torch.tensor([n_real, n], device=self.device)).reshape(-1, 2).sum(0)
        out.update(fd_real_samples=int(totals[0]), fd_samples=int(totals[1]))
        # values are already global (metric states are summed across ranks), so no sync_dist
        self.log(f"{stage}/fd", out.pop("fd"), prog_bar=True, add_dataloader_idx=False)
        self.log_dict({f"{stage}/{k}": float(v) for k, v in out.items()}, add_dataloader_idx=False)

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")
        if not self.trainer.sanity_checking:
            grid = self(self.fixed_z, self.fixed_labels if self.conditional else None)
            tb.log_images_grid(self, "samples/fixed_noise", (grid + 1) / 2, nrow=8, normalize=False)

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    # ------------------------------------------------------------------------------------------------ optimisers
    def configure_optimizers(self) -> Any:
        require_optimizer(self)
        # Lightning moves the module to its device before this hook, so the parameters say where the step runs
        device = next(self.generator.parameters()).device
        # no Lightning gradient clipping in manual optimisation: fused kernels are fine under mixed precision
        opt_d = build_optimizer(self.optimizer_factory, self.discriminator.parameters(), device)
        for g in opt_d.param_groups:
            g["lr"] *= self.hparams.d_lr_scale
        opt_g = build_optimizer(self.optimizer_factory, self.generator.parameters(), device)
        if self.scheduler_factory is None:
            return [opt_d, opt_g]
        total = int(self.trainer.estimated_stepping_batches)
        scheds = [self.scheduler_factory(opt_d, total_steps=total),
                  self.scheduler_factory(opt_g, total_steps=max(1, total // self.hparams.n_critic))]
        return [opt_d, opt_g], [{"scheduler": s, "interval": "step"} for s in scheds]
