"""Benchmark: the default speech/ctc task (eSpeak NG digits/words, test on held-out voices) on this machine.

    python scripts/evidence/bench_speech.py [extra overrides ...]
    OMP_NUM_THREADS=2 python scripts/evidence/bench_speech.py experiment=speech_synth_scratch   # docs/results/speech.md

Generates the corpus if absent (timed separately), trains through `python -m zoo train task=speech/ctc`,
and prints wall time and the test CER/WER the run reported on the held-out voices.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from common import ROOT, ZOO, run, shown, zoo_env

TIMEOUT_S = 20 * 60


def main(extra: list[str]) -> None:
    # One intra-op thread: on a busy 2-core machine two OpenMP threads spin against each other (6x slower
    # per step, measured); set OMP_NUM_THREADS=2 on an idle machine.
    env = zoo_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), HF_HUB_OFFLINE="1")
    t0 = time.time()
    subprocess.run([sys.executable, "-c", "from zoo.speech.data import SynthDigitsDataModule as D; D().prepare_data()"],
                   check=True, env=env, cwd=ROOT)
    gen_s = time.time() - t0
    cmd = [*ZOO, "train", "task=speech/ctc", "trainer.enable_progress_bar=false", *extra]
    done = run(cmd, env=env, timeout=TIMEOUT_S).check("training")
    print(json.dumps({"command": shown(cmd), "corpus_s": round(gen_s, 1), "train_and_test_s": round(done.wall, 1),
                      **done.metrics(), "run_dir": done.printed("run dir")}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="zoo overrides for the training run")
    main(ap.parse_args().overrides)
