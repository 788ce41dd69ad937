"""Benchmark: FSDD leave-one-speaker-out with `experiment=speech_fsdd` (Whisper tiny.en's encoder + CTC).

    python scripts/evidence/bench_speech_fsdd_whisper.py [--data ../shared/data/fsdd] [--speakers george,...]
        [overrides ...]

Per held-out speaker, one fold at a time: `python -m zoo train experiment=speech_fsdd
task.data.holdout_speaker=<name>` (its test/acc: lexicon beam search over the ten digit words), then
`python -m zoo predict` of the best checkpoint with greedy decoding on every file of that speaker (word accuracy =
exact matches with the spoken digit's name). Prints one JSON line per fold (wall seconds start to end, the load) and
the mean. `--forward` instead times the model (front end, encoder, head) on a 1 s utterance on one thread, bare and
with the preset's silence before and after it: wall and CPU milliseconds, median and range of 50 calls after 5
warm-up calls, with the load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import yaml
from common import ROOT, SHARED, ZOO, Spread, load1, run, zoo_env

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def run_fold(data: Path, speaker: str, extra: list[str], env: dict) -> dict:
    start, load = time.time(), load1()
    cmd = [*ZOO, "train", "experiment=speech_fsdd", "trainer.enable_progress_bar=false",
           f"task.data.root={data}", f"task.data.holdout_speaker={speaker}", *extra]
    trained = run(cmd, env=env, timeout=30 * 60).check(f"training for {speaker}")
    best, metrics = trained.printed("best checkpoint"), trained.metrics()
    files = sorted(data.glob(f"*_{speaker}_*.wav"))
    with_links = Path(best).parent.parent / "heldout_audio"  # inside the run: a folder of this speaker's files
    with_links.mkdir(exist_ok=True)
    for f in files:
        link = with_links / f.name
        if not link.exists():
            link.symlink_to(f.resolve())
    pred = subprocess.run([*ZOO, "predict", f"ckpt_path={best}", f"input={with_links}", "predict.batch_size=32",
                           "predict.decoder=greedy"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=10 * 60, check=True)
    rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
    correct = sum(r.get("text") == NAMES[int(Path(r["file"]).stem.split("_")[0])] for r in rows)
    return {"held_out": speaker, "files": len(rows), "word_acc_lexicon": metrics.get("test/acc"),
            "word_acc_greedy": round(correct / max(1, len(rows)), 4), "test_cer": metrics.get("test/cer"),
            "train_s": round(trained.wall, 1), "fold_s": round(time.time() - start, 1), "load_at_start": load,
            "load_at_end": load1(), "checkpoint": best}


def forward_ms(calls: int = 50, model: dict | None = None) -> tuple[Spread, Spread]:
    """Encoder (with its front end and head) on one 1 s utterance, one thread, the packaged weights: wall and CPU
    milliseconds per call (CPU time: what the call costs, hardly changed by other jobs on a loaded machine).
    `model`: task.module.model options (the preset's silence before and after the clip is read by the encoder too)."""
    import torch

    from zoo.speech.module import CTCRecognizer
    from zoo.speech.vocab import BLANK

    torch.set_num_threads(1)
    model = CTCRecognizer(vocab=[BLANK, " ", *"efghinorstuvwxz"], arch="whisper", sample_rate=16000,
                          pretrained="auto", model=model).model.eval()
    wave, n = torch.randn(1, 16000) * 0.1, torch.tensor([16000])
    wall, cpu = [], []
    with torch.inference_mode():
        for i in range(calls + 5):
            t, c = time.perf_counter(), time.thread_time()
            model(wave, n)
            if i >= 5:
                wall.append((time.perf_counter() - t) * 1e3)
                cpu.append((time.thread_time() - c) * 1e3)
    return Spread.of(wall), Spread.of(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    ap.add_argument("--speakers", default="george,jackson,lucas,nicolas")
    ap.add_argument("--forward", action="store_true", help="only time the encoder forward on a 1 s utterance")
    args, extra = ap.parse_known_args()
    if args.forward:
        preset = yaml.safe_load((ROOT / "configs" / "experiment" / "speech_fsdd.yaml").read_text())
        silence = {k: v for k, v in preset["task"]["module"]["model"].items() if k.startswith("silence_")}
        for model in (None, silence):  # the bare encoder, then with the preset's silence before and after
            wall, cpu = forward_ms(model=model)
            print(json.dumps({"model": model or {}, "forward_1s_wall_ms": wall.median_range(),
                              "forward_1s_cpu_ms": cpu.median_range(), "load": load1()}))
        return
    env = zoo_env(HF_HUB_OFFLINE="1")
    results = []
    for speaker in args.speakers.split(","):
        results.append(run_fold(Path(args.data).resolve(), speaker, extra, env))
        print(json.dumps(results[-1]), flush=True)
    mean = {k: round(sum(r[k] for r in results) / len(results), 4) for k in ("word_acc_lexicon", "word_acc_greedy")}
    print(json.dumps({"mean": mean, "overrides": extra}))


if __name__ == "__main__":
    main()
