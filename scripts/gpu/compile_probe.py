"""One compiled training run, looked into: step times, Dynamo's counters and a profiler trace of one compiled step.

    TORCH_LOGS=recompiles,graph_breaks python scripts/gpu/compile_probe.py NAME --out DIR [--steps 15] \\
        [--warmup 5] [--md DIR/gpu_bench.md] -- <zoo train overrides>

`zoo bench` says how fast a compiled step is; this says why: how many graphs Dynamo made, how often it recompiled
and where it broke the graph (TORCH_LOGS prints each, with the reason, to stderr), and which kernels one compiled
step ran (`DIR/trace_NAME.json.gz`, open it in chrome://tracing or Perfetto; the top kernels are printed too).
Writes `DIR/compile_NAME.json` and appends a row to the markdown file. The fit is the task's own, as `zoo bench`
runs it: trainer.compile=true, no validation, no checkpoints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TRAINER = {"limit_val_batches": 0, "num_sanity_val_steps": 0, "enable_checkpointing": False,
           "enable_progress_bar": False, "enable_model_summary": False, "max_epochs": 1_000_000, "max_steps": -1,
           "max_time": None, "limit_train_batches": None, "check_val_every_n_epoch": 1}


def probe_callback(units: Any, warmup: int, steps: int, trace: Path) -> Any:
    import torch
    from lightning.pytorch.callbacks import Callback

    class Probe(Callback):
        """Times steps warmup..warmup+steps-1, then profiles one more step and stops the fit."""

        def __init__(self) -> None:
            self.seen, self.step_s, self.units, self.kernels, self.top = 0, [], 0.0, None, ""
            self._t, self._prof = 0.0, None

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.seen == warmup + steps:
                from torch.profiler import ProfilerActivity, profile

                self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                self._prof.__enter__()
            self._t = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
            if warmup <= self.seen < warmup + steps:
                self.step_s.append(time.perf_counter() - self._t)
                self.units += float(units(pl_module, batch))
            if self._prof is not None:
                self._finish_trace()
                trainer.should_stop = True
            self.seen += 1

        def _finish_trace(self) -> None:
            from torch.autograd import DeviceType

            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
            events = prof.events()
            self.kernels = sum(1 for e in events if e.device_type == DeviceType.CUDA)
            self.top = prof.key_averages().table(sort_by="self_device_time_total", row_limit=15)
            prof.export_chrome_trace(str(trace))

    return Probe()


def dynamo_counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {group: {str(k): int(v) for k, v in c.items()} for group, c in counters.items() if c}


def run(name: str, out: Path, steps: int, warmup: int, overrides: list[str]) -> dict[str, Any]:
    from omegaconf import open_dict

    from zoo.core.build import build_data_and_module, start
    from zoo.core.config import compose, register_resolvers
    from zoo.core.trainer import build_trainer, prepare_module
    from zoo.kit.hooks import find_hooks

    register_resolvers()
    cfg = compose([f"run_dir=/tmp/compile_probe/{name}", "trainer.compile=true", *overrides])
    with open_dict(cfg):
        cfg.merge_with({"trainer": TRAINER})
    hooks = find_hooks(cfg.task).need("bench", "compile_probe")
    start(cfg)
    datamodule, module = build_data_and_module(cfg)
    probe = probe_callback(hooks.units, warmup, steps, out / f"trace_{name}.json.gz")
    trainer = build_trainer(cfg, [probe], [])
    t0 = time.perf_counter()
    trainer.fit(prepare_module(module, cfg.trainer), datamodule=datamodule)
    times = probe.step_s or [float("nan")]
    return {"name": name, "overrides": overrides, "wall_s": round(time.perf_counter() - t0, 1),
            "step_ms_mean": 1e3 * statistics.fmean(times), "step_ms_p50": 1e3 * statistics.median(times),
            "units_per_s": probe.units / sum(times), "unit": getattr(hooks, "UNIT", "units"),
            "kernels_in_profiled_step": probe.kernels, "dynamo": dynamo_counters(),
            "top_kernels": probe.top}


def markdown_row(r: dict[str, Any]) -> str:
    stats = r["dynamo"].get("stats", {})
    breaks = sum(r["dynamo"].get("graph_break", {}).values())
    recompiles = sum(r["dynamo"].get("recompiles", {}).values())
    return (f"| {r['name']} | {r['units_per_s']:.1f} {r['unit']}/s | {r['step_ms_mean']:.1f} / {r['step_ms_p50']:.1f} "
            f"| {stats.get('unique_graphs', 'n/a')} | {breaks} | {recompiles} | {r['kernels_in_profiled_step']} "
            f"| {r['wall_s']} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--eager", action="store_true", help="no compile: checks this script on a CPU in seconds")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_intermixed_args()
    args.out.mkdir(parents=True, exist_ok=True)
    overrides = [*args.overrides, "trainer.compile=false"] if args.eager else args.overrides
    result = run(args.name, args.out, args.steps, args.warmup, overrides)
    print(result.pop("top_kernels"))
    (args.out / f"compile_{args.name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["dynamo"], indent=1))
    if args.md:  # a table of its own: rows appended later would land under whatever the file has by then
        header = ("| compiled run | throughput | step ms mean / p50 | graphs | graph breaks | recompiles | "
                  "kernels in 1 step | wall (incl. compile) |\n|---|---|---|---|---|---|---|---|\n")
        with args.md.open("a") as f:
            f.write(f"\n**compile probe** `{' '.join(args.overrides)}`\n\n{header}{markdown_row(result)}\n")


if __name__ == "__main__":
    main()
