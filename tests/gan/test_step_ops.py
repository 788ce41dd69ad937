"""Aten ops dispatched by one DCGAN training step (default task): the host's cost of a step on a GPU.

At batch 32 a DCGAN step is a few GFLOP, so on a GPU its time is the host dispatching and launching ops, not the
device computing. The counts below are every aten op a TorchDispatchMode sees during `training_step` (D step, G
step, both optimiser steps, the EMA update), views and bookkeeping included: the same count as the 336 ops measured
on an H200 before gan/speed.py (458 on CPU, where torch's Adam then looped per parameter). docs/results/gan.md has
the table.
"""

from __future__ import annotations

from collections import Counter

import lightning as L
from torch.utils._python_dispatch import TorchDispatchMode

from zoo.core.build import build_data_and_module
from zoo.testing import compose

# Ops that launch no kernel: views (detach, view, expand), allocation, the profiler's markers.
BOOKKEEPING = {"empty", "lift_fresh", "_record_function_enter_new", "_record_function_exit"}


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        self.kernels += not (func.is_view or name in BOOKKEEPING)
        return func(*args, **(kwargs or {}))


def count_step(overrides: list[str], at: int = 2, log_every: int = 50) -> OpCounter:
    """Counts in training step `at` (steps before it create the optimisers' state), on CPU."""
    cfg = compose(["task=gan/dcgan", "task.module.eval_train_steps=3", *overrides])
    datamodule, module = build_data_and_module(cfg)
    counter, step = OpCounter(), module.training_step

    def counted(batch, batch_idx):  # noqa: ANN001, ANN202
        if batch_idx != at:
            return step(batch, batch_idx)
        with counter:
            out = step(batch, batch_idx)
        module.trainer.should_stop = True
        return out

    module.training_step = counted
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, log_every_n_steps=log_every)
    trainer.fit(module, datamodule=datamodule)
    assert counter.ops, "the counted step did not run"
    return counter


def test_default_step_ops_on_cpu():
    """CPU: foreach Adam (its bias corrections read each parameter's step count: 20 `.item()` per optimiser)."""
    c = count_step([])
    print(f"CPU step: {sum(c.ops.values())} aten ops, {c.kernels} launching kernels: {dict(c.ops.most_common())}")
    assert sum(c.ops.values()) <= 240  # 458 before (per-parameter Adam and EMA loops), 236 measured
    assert c.ops["_foreach_lerp_"] == 3 and "lerp_" not in c.ops  # Adam's two and the EMA's one


def test_fused_step_ops_as_on_cuda():
    """fused=True, what configure_optimizers picks on CUDA; torch has the fused Adam kernel on CPU too."""
    c = count_step(["+task.module.optimizer.fused=true"])
    total = sum(c.ops.values())
    print(f"fused step: {total} aten ops, {c.kernels} launching kernels: {dict(c.ops.most_common())}")
    assert total <= 185  # 336 before with foreach Adam (the H200 figure), 282 with fused Adam alone; 182 measured
    assert c.ops["_fused_adam_"] == 2 and "_local_scalar_dense" not in c.ops  # no host sync in the step


def test_logging_step_adds_the_statistics():
    """Every log_every_n_steps-th batch computes and logs D(x), D(G(z)) and the losses (~30 ops more; counted where
    every batch logs, since the first batch to log a key also builds Lightning's metric objects for it)."""
    quiet = sum(count_step(["+task.module.optimizer.fused=true"], log_every=50).ops.values())
    logged = count_step(["+task.module.optimizer.fused=true"], log_every=1)
    assert {"sigmoid", "clone"} <= set(logged.ops)
    assert 0 < sum(logged.ops.values()) - quiet <= 40
