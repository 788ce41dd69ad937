"""`trainer.compile`, `compile_mode`, `compile_options` and `compile_dynamic`: torch.compile of a task's networks, the
same way for every task.

Networks, not the LightningModule: `torch.compile(lightning_module)` compiles training_step/validation_step too, where
`self.log` and torchmetrics' Python counters recompile the graph on every step until Dynamo's cache limit. Each network
is compiled in place (`nn.Module.compile`), so state-dict keys stay as they are (no `_orig_mod.`) and checkpoints load
either way; the tasks that step their own optimisers (GAN, PPO) call their networks directly and get them compiled too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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


def check_compile_options(options: Any, mode: Any = None) -> None:
    """`trainer.compile_options`: null, or a mapping of Inductor settings by their names (torch refuses a mode with
    them, and names an unknown one only once the first batch compiles)."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ZooError(f"trainer.compile_options={options!r} is not a mapping; give Inductor settings by name, e.g. "
                       "'trainer.compile_options={epilogue_fusion: true, shape_padding: true}'")
    if mode is not None:
        raise ZooError(f"trainer.compile_mode={mode} and trainer.compile_options together: torch.compile takes one "
                       "of the two; a mode is a set of options (drop one of them)")
    import torch._inductor

    known = set(torch._inductor.list_options())
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        from difflib import get_close_matches

        near = get_close_matches(unknown[0], known, n=1)
        raise ZooError(f"trainer.compile_options: {unknown[0]} is not an Inductor setting"
                       + (f"; did you mean {near[0]}?" if near else "")
                       + " (torch._inductor.list_options() lists them)")


def compile_kwargs(tcfg: Any) -> dict[str, Any] | None:
    """torch.compile's keyword arguments for the run (`mode`, or `options`; `dynamic` when set), or None for an
    eager run."""
    mode = compile_mode(tcfg)
    options = tcfg.get("compile_options")
    if mode is None:
        if options is not None:
            log.warning("trainer.compile_options are unused while trainer.compile=false (add trainer.compile=true)")
        return None
    check_compile_options(options, tcfg.get("compile_mode"))
    kwargs: dict[str, Any] = {"options": dict(options)} if options is not None else {"mode": mode}
    if tcfg.get("compile_dynamic") is not None:
        kwargs["dynamic"] = bool(tcfg.get("compile_dynamic"))
    return kwargs


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


def compile_networks(module: torch.nn.Module, **settings: Any) -> list[str]:
    """Compile, in place, each network `networks(module)` names, with torch.compile's keyword arguments `settings`
    (`compile_kwargs`: a mode or options, and `dynamic`); their names."""
    chosen = networks(module)
    for net in chosen.values():
        net.compile(**settings)
    shown = ", ".join(f"{k} {v}" for k, v in settings.items())
    log.info("torch.compile (%s): %s", shown, ", ".join(chosen) or "nothing (no networks with parameters)")
    return list(chosen)


class MarkCudaGraphSteps(Callback):
    """Under `reduce-overhead` on CUDA each network call replays a CUDA graph; marking each training step's start
    (`torch.compiler.cudagraph_mark_step_begin`) tells torch that the last step's graph outputs may be reused from
    here on, so that they are not overwritten while a step still needs them."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
