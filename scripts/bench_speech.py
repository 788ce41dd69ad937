"""Benchmark: the default speech/ctc task (eSpeak NG digits/words, test on held-out voices) on this machine.

    python scripts/bench_speech.py [extra overrides ...]

Generates the corpus if absent (timed separately), trains through `python -m zoo train task=speech/ctc`,
and prints wall time and the test CER/WER the run reported on the held-out voices.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 20 * 60

# The zoo CLI (zoo.cli:main, what `python -m zoo` and the `zoo` script run). Started through -c so that a broad
# `pkill -f "zoo train"` by someone else on a shared machine does not end a 15-minute benchmark.
ZOO = [sys.executable, "-c", "import sys; from zoo.cli import main; main(sys.argv[1:])"]


def main(extra: list[str]) -> None:
    # One intra-op thread: on a busy 2-core machine two OpenMP threads spin against each other (6x slower
    # per step, measured); set OMP_NUM_THREADS=2 on an idle machine.
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    t0 = time.time()
    subprocess.run([sys.executable, "-c", "from speech.data import SynthDigitsDataModule as D; D().prepare_data()"],
                   check=True, env=env, cwd=ROOT)
    gen_s = time.time() - t0
    cmd = [*ZOO, "train", "task=speech/ctc", "trainer.enable_progress_bar=false", *extra]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT_S)
    train_s = time.time() - t0
    if proc.returncode != 0:
        print(proc.stdout[-3000:])
        raise SystemExit(f"training failed ({proc.returncode})")
    metrics = {k: float(v) for k, v in re.findall(r"^\s+(test/\w+)\s+([0-9.]+)$", proc.stdout, re.M)}
    run_dir = re.search(r"run dir:\s+(\S+)", proc.stdout)
    print(json.dumps({"command": "python -m zoo " + " ".join(cmd[3:]), "corpus_s": round(gen_s, 1), "train_and_test_s": round(train_s, 1),
                      **metrics, "run_dir": run_dir.group(1) if run_dir else None}))


if __name__ == "__main__":
    main(sys.argv[1:])
