"""`zoo bench`'s outputs: the markdown table on stdout (with the environment under it), and bench.json, bench.csv,
bench.png and TensorBoard scalars/hparams in the bench's run directory."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

from zoo.core.numbers import strict_json

# CSV columns, in order (rows also carry their combination's keys first).
FIELDS = ("index", "label", "precision", "compile", "channels_last", "batch_size", "devices", "status", "reason",
          "unit", "units_per_s", "units_per_s_min", "units_per_s_max", "runs", "speedup", "speedup_min", "speedup_max",
          "speedup_note", "step_ms_mean", "step_ms_p50", "step_ms_p90", "data_wait_frac", "ops_per_step", "ops_kind",
          "ops_eager", "flops_per_step", "mfu", "math", "math_flags", "peak_flops_per_device", "peak_source",
          "peak_mem_bytes", "energy_source", "energy_j", "energy_per_step_j", "energy_per_unit_j", "loss", "loss_ref",
          "precision_resolved", "device", "device_note", "world_size", "steps", "warmup", "seconds", "units")
# Fewer measured steps than this give speed-ups that noise and a cold start decide (2 steps once read 5.15x).
MIN_STEPS_FOR_SPEEDUP = 10

# The numbers TensorBoard gets, one scalar per metric per combination (step = the row's number).
TB_METRICS = ("units_per_s", "speedup", "step_ms_mean", "step_ms_p50", "step_ms_p90", "data_wait_frac",
              "ops_per_step", "flops_per_step", "mfu", "peak_mem_bytes", "energy_per_step_j", "energy_per_unit_j",
              "loss")


def add_reference(rows: list[dict[str, Any]]) -> None:
    """Speed-up against the first row (with several rounds: the median of the per-round ratios, and their range), and
    the first row's loss next to each row's (a fast but broken setting shows). No speed-up from fewer than
    MIN_STEPS_FOR_SPEEDUP measured steps: it says so instead."""
    import statistics

    first = rows[0] if rows and rows[0].get("status") == "ok" else None
    for r in rows:
        r["loss_ref"] = first.get("loss") if first else None
        r["speedup"] = r["speedup_min"] = r["speedup_max"] = r["speedup_note"] = None
        if r.get("status") != "ok" or first is None:
            continue
        steps = min(int(r.get("steps") or 0), int(first.get("steps") or 0))
        if steps < MIN_STEPS_FOR_SPEEDUP:
            r["speedup_note"] = f"not computed: {steps} measured steps (< {MIN_STEPS_FOR_SPEEDUP})"
            continue
        mine, ref = r.get("per_round") or {}, first.get("per_round") or {}
        ratios = sorted(mine[k] / ref[k] for k in mine if k in ref)
        if len(ratios) > 1:
            r.update(speedup=statistics.median(ratios), speedup_min=ratios[0], speedup_max=ratios[-1])
        else:
            r["speedup"] = r["units_per_s"] / first["units_per_s"]


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _bytes(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 2**20:.0f} MiB" if v < 2**30 else f"{v / 2**30:.2f} GiB"


def _flops(v: float | None) -> str:
    if not v:
        return "n/a"
    return f"{v / 1e12:.2f} T" if v >= 1e12 else f"{v / 1e9:.2f} G" if v >= 1e9 else f"{v / 1e6:.2f} M"


def _loss(r: dict[str, Any]) -> str:
    loss, ref = r.get("loss"), r.get("loss_ref")
    if loss is None:
        return "n/a"
    if ref is None or r["index"] == 1:
        return f"{loss:.4f}"
    return f"{loss:.4f} ({(loss - ref) / abs(ref) * 100:+.1f}%)" if ref else f"{loss:.4f}"


def _with_range(r: dict[str, Any], key: str, fmt: str) -> str:
    """`value` or, over several rounds, `median (min–max)`."""
    text = _num(r.get(key), fmt)
    if r.get(f"{key}_min") is not None and (r.get("runs") or 0) > 1:
        text += f" ({fmt.format(r[key + '_min'])}–{fmt.format(r[key + '_max'])})"
    return text


def _math(r: dict[str, Any]) -> str:
    """The math a row's MFU is against: fp32 | tf32 | bf16 | fp16 | fp64, with `autocast` for mixed precision."""
    kind = r.get("math") or "n/a"
    return f"{kind} autocast" if str(r.get("precision_resolved", "")).endswith("-mixed") else kind


def _ops(r: dict[str, Any], mixed_kinds: bool) -> str:
    n = r.get("ops_per_step")
    if n is None:
        return "n/a"
    kind = {"aten ops": " aten", "kernels": " kernels"}.get(str(r.get("ops_kind")), "") if mixed_kinds else ""
    return f"{n:,}{kind}" + (" (eager)" if r.get("ops_eager") else "")


def _speedup(r: dict[str, Any]) -> str:
    return f"n/a (< {MIN_STEPS_FOR_SPEEDUP} steps)" if r.get("speedup_note") else _with_range(r, "speedup", "{:.2f}x")


def table(rows: list[dict[str, Any]], unit: str) -> str:
    head = ["#", "setting", "math", f"{unit}/s", "speed-up", "step ms mean / p50 / p90", "data wait", "ops/step",
            "FLOP/step", "MFU", "peak mem", "J/step", f"mJ/{unit[:-1] if unit.endswith('s') else unit}",
            "loss (vs #1)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    mixed = len({r.get("ops_kind") for r in rows if r.get("status") == "ok"}) > 1
    for r in rows:
        if r.get("status") != "ok":  # failed, skipped, interrupted, or a measurement error: never a number
            cells = [str(r["index"]), r["label"], f"{r.get('status')}: {r.get('reason')}"] + [""] * (len(head) - 3)
        else:
            cells = [str(r["index"]), r["label"], _math(r), _with_range(r, "units_per_s", "{:.1f}"), _speedup(r),
                     f"{r['step_ms_mean']:.1f} / {r['step_ms_p50']:.1f} / {r['step_ms_p90']:.1f}",
                     f"{100 * r['data_wait_frac']:.1f}%", _ops(r, mixed), _flops(r.get("flops_per_step")),
                     _num(None if r.get("mfu") is None else 100 * r["mfu"], "{:.1f}%"), _bytes(r.get("peak_mem_bytes")),
                     _num(r.get("energy_per_step_j"), "{:.2f}"),
                     _num(None if r.get("energy_per_unit_j") is None else 1e3 * r["energy_per_unit_j"], "{:.3f}"),
                     _loss(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


OPS_KINDS = {"aten ops": "aten ops dispatched in one training step, per process",
             "kernels": "CUDA kernels launched in one training step, per process"}


def _row_note(r: dict[str, Any]) -> str:
    from zoo.measure.mathmode import describe_flags

    device = r.get("device_note") or r.get("device") or "n/a"
    flags = describe_flags(r["math_flags"]) if r.get("math_flags") else "n/a"
    peak = r.get("peak_flops_per_device")
    peak_text = f"{_flops(peak)}FLOP/s per device ({r.get('peak_source')})" if peak else "unknown (MFU n/a)"
    return f"{device}; {r.get('precision_resolved')} with fp32 {flags}; MFU against the {_math(r)} peak, {peak_text}"


def notes(rows: list[dict[str, Any]]) -> str:
    """Under the table: the device and math flags each row ran with, the peak its MFU divides by, and what the
    ops/step and speed-up columns mean here."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        if r.get("math_flags") is not None:  # measured (ok or a measurement error)
            groups.setdefault(_row_note(r), []).append(f"#{r['index']}")
    lines = [f"- **ran on** ({', '.join(ix)}): {text}" for text, ix in groups.items()]
    kinds = [OPS_KINDS.get(k, k) for k in sorted({str(r["ops_kind"]) for r in rows if r.get("ops_kind")})]
    if kinds:
        eager = "; (eager): a compiled CPU step, counted uncompiled" if any(r.get("ops_eager") for r in rows) else ""
        lines.append(f"- **ops/step**: {'; '.join(kinds)}{eager}")
    short = next((r["speedup_note"] for r in rows if r.get("speedup_note")), None)
    if short:
        lines.append(f"- **speed-up** {short}: run with bench.steps={MIN_STEPS_FOR_SPEEDUP} or more to compare rows")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in FIELDS})


def write_plot(path: Path, rows: list[dict[str, Any]], unit: str, title: str) -> None:
    """Bar chart of throughput per combination, speed-ups on the bars; skipped/failed rows as empty labelled slots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"#{r['index']} {r['label']}" for r in rows]
    values = [r["units_per_s"] if r.get("status") == "ok" else 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) + 2), 4.5))
    bars = ax.bar(range(len(rows)), values, color=["tab:blue" if v else "lightgray" for v in values])
    for bar, r in zip(bars, rows):
        text = _num(r.get("speedup"), "{:.2f}x") if r.get("status") == "ok" else r.get("status", "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{unit}/s")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_tensorboard(folder: Path, rows: list[dict[str, Any]], markdown: str) -> None:
    """bench/<metric> scalars (step = row number) and one HParams entry per measured combination."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as w:
        for r in rows:
            if r.get("status") != "ok":
                continue
            values = {m: float(r[m]) for m in TB_METRICS if isinstance(r.get(m), (int, float))}
            for m, v in values.items():
                w.add_scalar(f"bench/{m}", v, r["index"])
            hparams = {k: ("task" if r[k] is None else r[k] if not isinstance(r[k], bool) else str(r[k]))
                       for k in ("precision", "compile", "channels_last", "batch_size", "devices")}
            w.add_hparams(hparams, {f"hparam/{m}": v for m, v in values.items()}, run_name=f"{r['index']:02d}")
        w.add_text("bench/table", markdown)


def report(plan: Any, rows: list[dict[str, Any]]) -> None:
    from zoo.measure.env import collect, describe

    add_reference(rows)
    env = collect()
    heading = f"zoo bench {plan.task}: {plan.bench['steps']} measured steps after {plan.bench['warmup']} warm-up"
    rounds = max((r.get("runs") or 1 for r in rows), default=1)
    if rounds > 1:  # the rounds measured (an interrupted bench reports fewer than it asked for)
        heading += f", {rounds} rounds (median, min–max)"

    fixed = [f"{k}={show(v[0])}" for k, v in ((k, plan.bench[k]) for k in
             ("precision", "compile", "channels_last", "batch_size", "devices")) if len(v) == 1]
    md = "\n".join([f"## {heading}", "", f"fixed: {' '.join(fixed)}" if fixed else "", "", table(rows, plan.unit), "",
                    notes(rows), describe(env)])
    out = plan.run_dir
    # a NaN measurement is written as null: bench.json stays strict JSON
    (out / "bench.json").write_text(strict_json({"task": plan.task, "overrides": plan.overrides, "bench": plan.bench,
                                                 "unit": plan.unit, "rows": rows, "env": env}, indent=2, default=str))
    write_csv(out / "bench.csv", rows)
    (out / "bench.md").write_text(md + "\n")
    if rows:
        write_plot(out / "bench.png", rows, plan.unit, heading)
    write_tensorboard(out / "tensorboard", rows, md)
    say("\n" + md + "\n")
    say(f"zoo bench: wrote {out}/bench.{{json,csv,md{',png' if rows else ''}}} and tensorboard/ "
          f"(tensorboard --logdir {out / 'tensorboard'})")


def show(value: Any) -> str:
    """A bench value as the user writes it (`task` for the task's own setting)."""
    return "task" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def say(line: str, stream: Any = None) -> None:
    """Progress lines: a closed console (`| head`, a killed pipe) must not cost the report of what was measured."""
    try:
        print(line, file=stream or sys.stdout, flush=True)
    except (BrokenPipeError, OSError):
        pass
