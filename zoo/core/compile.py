"""`trainer.compile` and `trainer.compile_mode`: torch.compile of a task's networks, the same way for every task.

Networks, not the LightningModule: `torch.compile(lightning_module)` compiles training_step/validation_step too, where
`self.log` and torchmetrics' Python counters recompile the graph on every step until Dynamo's cache limit. Each network
is compiled in place (`nn.Module.compile`), so state-dict keys stay as they are (no `_orig_mod.`) and checkpoints load
either way; the tasks that step their own optimisers (GAN, PPO) call their networks directly and get them compiled too.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from zoo.errors import ZooError

log = logging.getLogger(__name__)

# torch.compile's modes. reduce-overhead records CUDA graphs (on CUDA; elsewhere it compiles without them).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile_mode(mode: Any) -> None:
    """`trainer.compile_mode`: null (torch's default mode) or one of torch.compile's modes."""
    if mode is not None and mode not in COMPILE_MODES:
        raise ZooError(f"trainer.compile_mode={mode} is not a torch.compile mode; use one of "
                       f"{', '.join(COMPILE_MODES)} (or null: default), with trainer.compile=true")


def compile_mode(tcfg: Any) -> str | None:
    """The mode the run compiles with, or None for an eager run (`trainer.compile` false)."""
    mode = tcfg.get("compile_mode")
    check_compile_mode(mode)
    if not tcfg.get("compile"):
        if mode is not None:
            log.warning("trainer.compile_mode=%s is unused while trainer.compile=false: the networks run eagerly "
                        "(add trainer.compile=true to compile them)", mode)
        return None
    return str(mode or "default")


def networks(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """What a module has compiled: its own `compiled_networks()` where it defines one (a task that must refuse, or
    compiles only some networks), else its direct children that hold parameters (metrics and containers left out)."""
    own = getattr(module, "compiled_networks", None)
    if callable(own):
        return dict(own())
    from torchmetrics import Metric

    return {name: child for name, child in module.named_children()
            if not isinstance(child, (Metric, torch.nn.ModuleDict, torch.nn.ModuleList))
            and any(True for _ in child.parameters())}


def compile_networks(module: torch.nn.Module, mode: str = "default") -> list[str]:
    """Compile, in place, each network `networks(module)` names, with torch.compile's `mode`; their names."""
    chosen = networks(module)
    for net in chosen.values():
        net.compile(mode=mode)
    log.info("torch.compile (mode %s): %s", mode, ", ".join(chosen) or "nothing (no networks with parameters)")
    return list(chosen)


class MarkCudaGraphSteps(Callback):
    """Under `reduce-overhead` on CUDA each network call replays a CUDA graph; marking each training step's start
    (`torch.compiler.cudagraph_mark_step_begin`) tells torch that the last step's graph outputs may be reused from
    here on, so that they are not overwritten while a step still needs them."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
