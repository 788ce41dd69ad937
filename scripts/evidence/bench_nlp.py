"""Benchmark nlp/bert on the real data in ../shared/data/text (CR, SUBJ): dev accuracy, time per epoch, tokens/s,
pretrained MiniLM against the same run from random init.

    python scripts/evidence/bench_nlp.py                       # cr and subj, pretrained and random init
    python scripts/evidence/bench_nlp.py --data cr --init pretrained --timeout 1200
    python scripts/evidence/bench_nlp.py --base --data cr --init pretrained --threads 2   # experiment=nlp_cr_base

Each run is a real `python -m zoo train experiment=nlp_<data>` in a subprocess (CSV logger, no test, no export),
killed after --timeout seconds. The table it prints is what docs/nlp.md quotes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import SHARED, ZOO_MODULE, csv_series, run, shown, this_command, write_record, zoo_env


def run_one(data: str, init: str, epochs: int | None, timeout: int, extra: list[str], threads: int = 1,
            suffix: str = "") -> dict:
    out_root = Path(tempfile.mkdtemp(prefix=f"bench_nlp_{data}_{init}_"))
    cmd = [*ZOO_MODULE, "train", f"experiment=nlp_{data}{suffix}", f"task.module.pretrained={init == 'pretrained'}",
           "logger=csv", "test_after_fit=false", "task.module.export_hf=false", "task.module.worst_k=0",
           "trainer.enable_progress_bar=false", "callbacks.progress_bar=null",
           "trainer.enable_model_summary=false",
           "trainer.num_sanity_val_steps=0", *([f"trainer.max_epochs={epochs}"] if epochs else []), *extra]
    env = zoo_env(ZOO_OUTPUT_ROOT=str(out_root), ZOO_SHARED_DATA=str(SHARED), OMP_NUM_THREADS=str(threads))
    print(f"$ OMP_NUM_THREADS={threads}", shown(cmd), flush=True)
    done = run(cmd, env=env, timeout=timeout)
    status = done.status
    logs = "".join(p.read_text(errors="replace") for p in out_root.rglob("cli.log"))
    if "Received SIGTERM" in logs:  # the shared machine has seen stray SIGTERMs: never report a cut run as "ok"
        status = "interrupted (SIGTERM)"
    files = sorted(out_root.rglob("metrics.csv"))
    if not files:
        return {"data": data, "init": init, "status": f"{status}: no metrics\n{done.tail()}", "wall": done.wall,
                "load": done.load}
    m = csv_series(files[0])
    return {"data": data, "init": init, "status": status, "wall": done.wall, "val_acc": m.get("val/acc", []),
            "epoch_sec": m.get("train/epoch_sec", []), "tok_s": m.get("train/tokens_per_sec", []),
            "pad": m.get("train/pad_fraction", []), "cmd": shown(cmd), "load": done.load}


def row(r: dict) -> str:
    if "val_acc" not in r:
        return f"| {r['data']} | {r['init']} | - | - | - | - | - | {r['status']} |"
    accs = ", ".join(f"{a:.4f}" for a in r["val_acc"])
    best = max(r["val_acc"]) if r["val_acc"] else float("nan")
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return (f"| {r['data']} | {r['init']} | {best:.4f} | {accs} | {mean(r['epoch_sec']):.0f} | "
            f"{mean(r['tok_s']):.0f} | {mean(r['pad']):.2f} | {r['status']}, wall {r['wall']:.0f} s, {r['load']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["cr", "subj"], choices=["cr", "subj"])
    ap.add_argument("--init", nargs="+", default=["pretrained", "random"], choices=["pretrained", "random"])
    ap.add_argument("--base", action="store_true", help="the base-size presets nlp_<data>_base (all-mpnet-base-v2)")
    ap.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch/OpenMP threads; 1 on a shared machine (when busy, 2 threads spin-wait on each other)")
    ap.add_argument("--parse", nargs="+", metavar="RUN_DIR", help="only print the table rows of finished run dirs")
    ap.add_argument("extra", nargs="*", help="more zoo overrides, e.g. task.data.batch_size=16")
    args = ap.parse_args()
    if args.parse:
        for run_dir in args.parse:
            m = csv_series(next(Path(run_dir).rglob("metrics.csv")))
            cfg = (Path(run_dir) / "config.yaml").read_text()
            data = next((d for d in ("cr", "subj") if f"text/{d}/" in cfg), "?")
            init = "pretrained" if "pretrained: true" in cfg else "random"
            print(row({"data": data, "init": init, "status": "parsed", "wall": float("nan"), "load": run_dir,
                       "val_acc": m.get("val/acc", []), "epoch_sec": m.get("train/epoch_sec", []),
                       "tok_s": m.get("train/tokens_per_sec", []), "pad": m.get("train/pad_fraction", [])}))
        return
    missing = [d for d in args.data if not (SHARED / "text" / d / "train.tsv").is_file()]
    if missing:
        raise SystemExit(f"bench_nlp: data for {missing} not found under {SHARED / 'text'} (set ZOO_SHARED_DATA)")
    results = []
    for data in args.data:
        for init in args.init:
            results.append(run_one(data, init, args.epochs, args.timeout, args.extra, args.threads,
                                   "_base" if args.base else ""))
            print(row(results[-1]), flush=True)
    print("\n| data | init | best dev acc | dev acc per epoch | train s/epoch | tokens/s | pad fraction | run |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    for r in results:
        print(row(r))
    for r in results:
        if "cmd" in r:
            print(f"# {r['data']}/{r['init']}: {r['cmd']}")
    if not args.extra and args.epochs is None:  # the presets as they are: README and the nlp pages render these
        for r in results:
            if r.get("val_acc") and r["status"] == "ok":
                record(r, "_base" if args.base else "")


def record(r: dict, suffix: str) -> None:
    name = f"nlp.{r['data']}{suffix}_acc" if r["init"] == "pretrained" else f"nlp.{r['data']}{suffix}_random_init_acc"
    train_s = sum(r["epoch_sec"])
    extra = {"epochs": len(r["val_acc"]), "train_s": round(train_s), "wall_s": round(r["wall"]),
             "wall_min": round(r["wall"] / 60, 1), "s_per_epoch": round(train_s / max(len(r["epoch_sec"]), 1)),
             "run": r["cmd"]}
    print("record:", write_record(name, round(max(r["val_acc"]), 4), metric=f"val/acc ({r['data'].upper()} dev), best",
                                  command=this_command(), preset=f"nlp_{r['data']}{suffix}", load=r["load"],
                                  extra=extra))


if __name__ == "__main__":
    main()
