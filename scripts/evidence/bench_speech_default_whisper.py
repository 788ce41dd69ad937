"""Benchmark: the default speech/ctc task (eSpeak NG digits/words, test on held-out voices, on Whisper tiny.en's
pretrained encoder) against the same data on the from-scratch recipe (`experiment=speech_synth_scratch`, a BiLSTM on
40 log-Mel bins, the default before the Whisper encoder), side by side on this machine.

    python scripts/evidence/bench_speech_default_whisper.py [--pairs 3] [--only scratch|whisper]
        [--first scratch|whisper] [--scratch "<overrides>"] [--whisper "<overrides>"] [--threads 1]
        [--log runs.jsonl]

The corpus is generated first if absent (untimed; both recipes read the same 16 kHz corpus). Then, per pair, one
`python -m zoo train experiment=speech_synth_scratch` and one `python -m zoo train task=speech/ctc`, their order
alternated pair by pair (`--first` first in pairs 1, 3, ...), one run at a time, each with `--threads` intra-op
threads (`trainer.num_threads`, OMP_NUM_THREADS; 0: torch's default, one per core). Each run prints one JSON line
(wall seconds from start to exit, CPU seconds, test CER/WER on the held-out voices, the 1-minute load before and
after); the end prints the median and range of each recipe and the median of the per-pair ratios whisper / scratch.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from common import ROOT, ZOO, Spread, run, shown, zoo_env

TIMEOUT_S = 30 * 60
RECIPES = {"scratch": ["experiment=speech_synth_scratch"], "whisper": ["task=speech/ctc"]}
COMMON = ["trainer.enable_progress_bar=false"]


def one_run(name: str, extra: list[str], env: dict[str, str], threads: int) -> dict:
    cmd = [*ZOO, "train", *RECIPES[name], *COMMON, *[f"trainer.num_threads={threads}"] * bool(threads), *extra]
    done = run(cmd, env=env, timeout=TIMEOUT_S).check(f"{name} run")
    metrics = done.metrics()
    return {"recipe": name, "command": shown(cmd), "wall_s": round(done.wall, 1), "cpu_s": round(done.cpu, 1),
            "test_cer": metrics.get("test/cer"), "test_wer": metrics.get("test/wer"),
            "load_before": round(done.load_before, 2), "load_after": round(done.load_after, 2),
            "run_dir": done.printed("run dir")}


def summary(rows: list[dict]) -> dict:
    out: dict = {}
    for name in RECIPES:
        mine = [r for r in rows if r["recipe"] == name]
        if mine:
            wall, cer = Spread.of(r["wall_s"] for r in mine), Spread.of(r["test_cer"] for r in mine)
            loads = [r[k] for r in mine for k in ("load_before", "load_after")]
            out[name] = {"runs": len(mine), "wall_s": wall.median_range(".1f"), "test_cer": cer.median_range(".4f"),
                         "load": f"{min(loads):.1f}-{max(loads):.1f}"}
    pairs = [(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)
             if {rows[i]["recipe"], rows[i + 1]["recipe"]} == set(RECIPES)]
    if pairs:
        ratios = [next(r for r in p if r["recipe"] == "whisper")["wall_s"]
                  / next(r for r in p if r["recipe"] == "scratch")["wall_s"] for p in pairs]
        out["wall_ratio_whisper_over_scratch"] = Spread.of(ratios).median_range(".3f")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="pairs of runs, order alternated (default 3)")
    ap.add_argument("--first", choices=sorted(RECIPES), default="scratch", help="the recipe run first in pair 1")
    ap.add_argument("--only", choices=sorted(RECIPES), help="run only this recipe, --pairs times")
    ap.add_argument("--scratch", default="", help="extra overrides of the from-scratch run, one string")
    ap.add_argument("--whisper", default="", help="extra overrides of the default (Whisper) run, one string")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per run (0: torch's default)")
    ap.add_argument("--log", type=Path, help="also append each run's JSON line to this file")
    args = ap.parse_args()
    if args.pairs < 1:
        raise SystemExit("bench_speech_default_whisper: --pairs must be at least 1")
    extra = {"scratch": shlex.split(args.scratch), "whisper": shlex.split(args.whisper)}
    env = zoo_env(HF_HUB_OFFLINE="1", **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    subprocess.run([sys.executable, "-c", "from zoo.speech.data import SynthDigitsDataModule as D; D().prepare_data()"],
                   check=True, env=env, cwd=ROOT)
    rows: list[dict] = []
    for i in range(args.pairs):
        first, second = args.first, next(r for r in RECIPES if r != args.first)
        order = [args.only] if args.only else ([first, second] if i % 2 == 0 else [second, first])
        for name in order:
            rows.append({"pair": i + 1, **one_run(name, extra[name], env, args.threads)})
            line = json.dumps(rows[-1])
            print(line, flush=True)
            if args.log:
                with args.log.open("a") as f:
                    f.write(line + "\n")
    print(json.dumps({"summary": summary(rows)}), flush=True)


if __name__ == "__main__":
    main()
