"""The one trainer factory every domain shares: `cfg.trainer` -> `lightning.Trainer`."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from zoo.measure.mathmode import MathMode

log = logging.getLogger(__name__)

# Keys of cfg.trainer that the zoo handles itself; everything else goes to lightning.Trainer as is.
ZOO_KEYS = ("float32_matmul_precision", "channels_last", "compile", "compile_mode", "compile_options",
            "compile_dynamic", "benchmark", "precision", "num_threads", "find_unused_parameters", "collective_timeout",
            "ema_decay")


def cuda_wanted(accelerator: str) -> bool:
    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def resolve_precision(precision: str | int, accelerator: str = "auto") -> str:
    """`auto`: bf16-mixed on GPUs with bf16 (Ampere+), 16-mixed with grad scaling on older GPUs, 32-true otherwise.
    Other values (Lightning's, and the zoo's `tf32`: 32-true with TF32 matmuls and convolutions) stay as they are."""
    precision = str(precision)
    if precision != "auto":
        return precision
    if cuda_wanted(accelerator):
        return "bf16-mixed" if precision_problem("bf16-mixed", accelerator) is None else "16-mixed"
    return "32-true"


def precision_problem(precision: str, accelerator: str = "auto") -> str | None:
    """Why this machine cannot run `precision` as asked, or None: the one place that checks the hardware for it
    (`resolve_precision`'s `auto` picks by it; `zoo bench` skips a combination with this reason)."""
    cuda = cuda_wanted(accelerator)
    if precision == "tf32" and not cuda:
        return "TF32 is a GPU (Ampere+) math mode; on a CPU it is 32-true"
    if cuda and precision == "tf32" and torch.cuda.get_device_capability(0) < (8, 0):
        return f"{_gpu_name()} has no TF32 (Ampere+)"
    if cuda and "bf16" in precision and not torch.cuda.is_bf16_supported():
        return f"{_gpu_name()} has no bf16"
    return None


def _gpu_name() -> str:
    try:
        return torch.cuda.get_device_name(0)
    except (RuntimeError, AssertionError):  # a driver that answers availability but not names
        return "this GPU"


def plain_trainer(tcfg: DictConfig | dict) -> dict[str, Any]:
    """The trainer config as a plain dict with string keys, interpolations resolved."""
    t = OmegaConf.to_container(tcfg, resolve=True) if isinstance(tcfg, DictConfig) else tcfg
    if not isinstance(t, dict):
        raise TypeError(f"the trainer config is a mapping, not {type(t).__name__}")
    return {str(k): v for k, v in t.items()}


def math_mode(tcfg: DictConfig | dict) -> MathMode:
    """The run's math as one value, from `trainer.precision` and `trainer.float32_matmul_precision`: what the process
    switches are set to, what `zoo bench` records, what MFU's peak is for."""
    t = plain_trainer(tcfg)
    accelerator = str(t.get("accelerator", "auto"))
    return MathMode.of(resolve_precision(t.get("precision", "auto"), accelerator), t.get("float32_matmul_precision"))


def resolve_benchmark(benchmark: Any, accelerator: str, deterministic: bool) -> bool | None:
    """cudnn.benchmark `auto`: on for CUDA (fixed input sizes pay), never together with deterministic mode."""
    if benchmark in (None, "auto"):
        return bool(cuda_wanted(accelerator) and not deterministic)
    return bool(benchmark)


def trainer_kwargs(tcfg: DictConfig | dict, mode: MathMode | None = None) -> dict[str, Any]:
    """Plain kwargs for lightning.Trainer from the trainer config (zoo-only keys resolved or removed); `mode`: the
    run's math mode where the caller has it already."""
    t = plain_trainer(tcfg)
    accelerator = str(t.get("accelerator", "auto"))
    kwargs = {k: v for k, v in t.items() if k not in ZOO_KEYS}
    kwargs["precision"] = (mode or math_mode(t)).precision
    kwargs["benchmark"] = resolve_benchmark(t.get("benchmark"), accelerator, bool(t.get("deterministic")))
    strategy = kwargs.get("strategy")
    if t.get("find_unused_parameters") or t.get("collective_timeout"):
        processes = device_count(t.get("devices", "auto"), accelerator) * int(t.get("num_nodes") or 1)
        if strategy in (None, "auto") and processes > 1:
            strategy = "ddp"  # what Lightning's "auto" picks for several CPU/GPU processes
    if t.get("find_unused_parameters"):
        strategy = kwargs["strategy"] = with_find_unused(strategy)
    if t.get("collective_timeout"):
        strategy = kwargs["strategy"] = with_timeout(strategy, float(t["collective_timeout"]))
    if isinstance(strategy, dict):  # e.g. {_target_: lightning.pytorch.strategies.FSDPStrategy, ...}
        from zoo.base import instantiate

        kwargs["strategy"] = instantiate(strategy)
    return kwargs


def device_count(devices: Any, accelerator: str) -> int:
    """How many processes per node `devices` means, parsed by Lightning's own accelerator (int, ids, "auto")."""
    from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator

    acc = CUDAAccelerator if cuda_wanted(accelerator) else CPUAccelerator
    if devices in (None, "auto"):
        return acc.auto_device_count()
    parsed = acc.parse_devices(devices)
    return len(parsed) if isinstance(parsed, (list, tuple)) else int(parsed or 0)


def with_find_unused(strategy: Any) -> Any:
    """DDP that tolerates parameters without gradients in a step (a GAN's D step leaves G's unused): Lightning's
    registered `*_find_unused_parameters_true` names, or the kwarg on a DDPStrategy mapping; others unchanged."""
    if isinstance(strategy, str) and strategy in ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook"):
        return f"{strategy}_find_unused_parameters_true"
    if isinstance(strategy, dict) and "DDPStrategy" in str(strategy.get("_target_", "")):
        return {**strategy, "find_unused_parameters": True}
    return strategy


def with_timeout(strategy: Any, seconds: float) -> Any:
    """DDP/FSDP whose collectives give up after `seconds` (torch's default: 30 min on gloo, 10 on NCCL): a rank that
    died or hangs where no watcher sees it (another node, a stuck peer) ends the survivors in bounded time, with the
    error `zoo.core.ddp.peer_failure` turns into one line. Registered names become the same strategy built with the
    timeout; a `{_target_: ...DDPStrategy|FSDPStrategy}` mapping gets the keyword; others stay as they are."""
    timeout = {"_target_": "datetime.timedelta", "seconds": seconds}
    if isinstance(strategy, str) and strategy.startswith(("ddp", "fsdp")):
        from lightning.pytorch.strategies import StrategyRegistry

        if strategy in StrategyRegistry:
            entry = StrategyRegistry[strategy]
            cls = entry["strategy"]
            return {"_target_": f"{cls.__module__}.{cls.__qualname__}", **entry["init_params"], "timeout": timeout}
    target = str(strategy.get("_target_", "")) if isinstance(strategy, dict) else ""
    if any(s in target for s in ("DDPStrategy", "FSDPStrategy")):
        return {"timeout": timeout, **strategy}  # a timeout the mapping sets itself wins
    return strategy


def apply_global_switches(tcfg: DictConfig) -> None:
    """Process-wide numerics switches, set before any model is built: threads and the math mode."""
    threads = tcfg.get("num_threads")
    if threads:  # several processes sharing few cores run far faster with fewer intra-op threads each
        torch.set_num_threads(int(threads))
    mode = math_mode(tcfg)
    mode.apply()  # fp32 matmuls and cuDNN convs/RNNs alike: IEEE for 32-true, TF32 for tf32
    if mode.fp32 == "tf32" and mode.precision == "32-true" and not cuda_wanted(str(tcfg.get("accelerator", "auto"))):
        log.info("trainer.precision=tf32 on a CPU: no TF32 here, the math is IEEE fp32")


# Console lines Lightning prints that are wrong or beside the point for a zoo run, each dropped for a reason:
NOISE_WARNINGS = (
    # torch 2.14 deprecates LeafSpec and Lightning 2.6's own _pytree still builds one: nothing the user can change
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",
    # false for zoo runs: Lightning logs every log_every_n_steps *global* steps, so epochs shorter than the interval
    # still log (tests/test_trainer.py checks the TensorBoard steps)
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    # a module's batch hook beside a datamodule is the intended split (vision: channels_last inputs), not a mistake
    r"You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a `LightningDataModule`",
)
NOISE_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class DropTips(logging.Filter):
    """Lightning's advertising line ("💡 Tip: ... litlogger") on every run, the weight average's "Found
    current_model_state" line, twice on every resume with `trainer.ema_decay` (the zoo's resume line says it), and
    "Skipping setting a default `ModelSummary`" on every fit (the zoo's own table, zoo.core.summary, is that one)."""

    LINES = ("\N{ELECTRIC LIGHT BULB} Tip", "Found current_model_state in the checkpoint",
             "Trainer already configured with model summary callbacks")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.LINES)


def quiet_framework_noise() -> None:
    for pattern in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name in NOISE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropTips) for f in logger.filters):
            logger.addFilter(DropTips())


def build_trainer(cfg: DictConfig, callbacks: list, loggers: list, plugins: list | None = None) -> Any:
    """cfg.trainer + ready callbacks/loggers -> lightning.Trainer (with atomic checkpoint IO)."""
    import lightning.pytorch as pl

    from zoo.core.checkpoint import AtomicCheckpointIO

    quiet_framework_noise()
    mode = math_mode(cfg.trainer)  # once: Lightning's precision and the log line below both come from it
    kwargs = trainer_kwargs(cfg.trainer, mode)
    from zoo.core.callbacks import FiniteTraining

    # first: a diverged step stops the run before any callback saves on that step (every domain, GAN and PPO too)
    callbacks = [FiniteTraining(), *callbacks, *zoo_callbacks(cfg.trainer, kwargs, callbacks)]
    if kwargs.get("enable_progress_bar") is False:
        from lightning.pytorch.callbacks import ProgressBar

        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not loggers:
        # LearningRateMonitor refuses to run without a logger.
        from lightning.pytorch.callbacks import LearningRateMonitor

        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    trainer = pl.Trainer(
        **kwargs,
        callbacks=callbacks,
        logger=loggers or False,
        plugins=[AtomicCheckpointIO(), *(plugins or [])],
        default_root_dir=str(cfg.run_dir),
    )
    log.info("trainer: accelerator=%s devices=%s strategy=%s precision=%s fp32 math=%s",
             type(trainer.accelerator).__name__, trainer.num_devices, type(trainer.strategy).__name__,
             mode.precision, mode.fp32)
    return trainer


def zoo_callbacks(tcfg: DictConfig, kwargs: dict[str, Any], callbacks: list) -> list:
    """The callbacks the zoo's own trainer switches add: the weight average, the CUDA-graph step marks of
    `compile_mode=reduce-overhead`, and the model table without Lightning's always-zero FLOPs column."""
    from lightning.pytorch.callbacks import ModelSummary

    from zoo.core.compile import MarkCudaGraphSteps

    extra: list = []
    if tcfg.get("ema_decay"):
        from zoo.core.callbacks import WeightEMA

        extra.append(WeightEMA(tcfg.ema_decay))
    if tcfg.get("compile") and tcfg.get("compile_mode") == "reduce-overhead":
        extra.append(MarkCudaGraphSteps())
    if kwargs.get("enable_model_summary", True) is not False and not any(isinstance(c, ModelSummary)
                                                                        for c in callbacks):
        from zoo.core.summary import ZooModelSummary

        extra.append(ZooModelSummary())
    return extra


def prepare_module(module: Any, tcfg: DictConfig | dict[str, Any]) -> Any:
    """channels_last and torch.compile switches, applied to the module before fit."""
    from zoo.core.compile import compile_kwargs, compile_networks

    if tcfg.get("channels_last"):
        module = module.to(memory_format=torch.channels_last)
        module.input_memory_format = torch.channels_last  # a module that reads it converts its input batches too
    kwargs = compile_kwargs(tcfg)
    if kwargs is not None:
        compile_networks(module, **kwargs)
    return module
