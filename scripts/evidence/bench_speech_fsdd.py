"""Benchmark: FSDD leave-one-speaker-out word accuracy (train on 3 speakers, test on the 4th).

    python scripts/evidence/bench_speech_fsdd.py [--data ../shared/data/fsdd] [--speakers george,...] [overrides ...]

For each held-out speaker: manifests go to a temp folder (never into the repo); the training speakers' files with
index 0-4 (FSDD's own test split) are the validation set, so model selection never sees the held-out speaker.
Training runs through `python -m zoo train experiment=speech_fsdd_manifests`, then `python -m zoo predict` transcribes
every file of the held-out speaker; word accuracy = exact matches of the transcript with the spoken digit's name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from common import ROOT, SHARED, ZOO, run, zoo_env

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def synth_digit_rows(folder: Path) -> list[dict]:
    """Training rows of a zoo eSpeak corpus (speech/synth.py) whose transcript is digits only: many synthetic
    voices beside FSDD's 3 human ones (multi-condition training)."""
    from zoo.speech.manifest import read_manifest  # resolves the corpus' relative paths

    return [{"audio_filepath": u.path, "text": u.text} for u in read_manifest(str(folder / "train.jsonl"))
            if all(w in NAMES for w in u.text.split())]


def write_manifests(data: Path, held_out: str, out: Path, extra_train: list[dict] | None = None) -> Path:
    files = sorted(data.glob("*.wav"))
    if not files:
        raise SystemExit(f"no FSDD wav files in {data}: the benchmark needs ../shared/data/fsdd")
    split = {"train": [], "val": [], "test": []}
    for f in files:
        digit, speaker, index = f.stem.split("_")
        row = {"audio_filepath": str(f.resolve()), "text": NAMES[int(digit)]}
        key = "test" if speaker == held_out else ("val" if int(index) < 5 else "train")
        split[key].append(row)
    split["train"] += extra_train or []
    (out / "test_audio").mkdir(parents=True, exist_ok=True)
    for name, rows in split.items():
        with open(out / f"{name}.jsonl", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    for r in split["test"]:  # a folder of the held-out speaker's files for `zoo predict`
        link = out / "test_audio" / Path(r["audio_filepath"]).name
        if not link.exists():
            link.symlink_to(r["audio_filepath"])
    return out


def run_fold(data: Path, speaker: str, extra: list[str], env: dict, mix: list[dict], lexicon: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"fsdd-{speaker}-") as tmp:
        m = write_manifests(data, speaker, Path(tmp), mix)
        decode = []
        if lexicon:  # flashlight beam search restricted to the ten digit words
            (m / "digits.lex").write_text("".join(f"{w}\t{' '.join(w)} |\n" for w in NAMES))
            decode = ["predict.decoder=beam", f"predict.lexicon={m / 'digits.lex'}"]
        cmd = [*ZOO, "train", "experiment=speech_fsdd_manifests", "trainer.enable_progress_bar=false",
               f"task.data.train_manifest={m / 'train.jsonl'}", f"task.data.val_manifest={m / 'val.jsonl'}",
               f"task.data.test_manifest={m / 'test.jsonl'}", *extra]
        trained = run(cmd, env=env, timeout=30 * 60).check(f"training for {speaker}")
        best, metrics = trained.printed("best checkpoint"), trained.metrics()
        # stdout alone: the JSON lines of the transcripts, the console log kept apart
        pred = subprocess.run([*ZOO, "predict", f"ckpt_path={best}", f"input={m / 'test_audio'}",
                               "predict.batch_size=32", *decode], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=10 * 60, check=True)
        rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
        correct = sum(r.get("text") == NAMES[int(Path(r["file"]).stem.split("_")[0])] for r in rows)
    return {"held_out": speaker, "files": len(rows), "word_acc": round(correct / max(1, len(rows)), 4),
            "test_cer": metrics.get("test/cer"), "train_s": round(trained.wall, 1), "checkpoint": best}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    ap.add_argument("--speakers", default="george,jackson,lucas,nicolas")
    ap.add_argument("--mix-synth", metavar="CORPUS_DIR",
                    help="add the digit-only training utterances of a zoo eSpeak corpus at 8 kHz (e.g. "
                         "~/.cache/zoo/speech/synth-<hash>) to every fold's training manifest")
    ap.add_argument("--lexicon", action="store_true", help="decode with beam search over the ten digit words")
    args, extra = ap.parse_known_args()
    # One intra-op thread: on a busy 2-core machine two OpenMP threads spin against each other (6x slower
    # per step, measured); set OMP_NUM_THREADS=2 on an idle machine.
    env = zoo_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), HF_HUB_OFFLINE="1")
    mix = synth_digit_rows(Path(args.mix_synth).expanduser()) if args.mix_synth else []
    if mix:
        print(f"# + {len(mix)} synthetic digit-only utterances in every training manifest", flush=True)
    results = []
    for speaker in args.speakers.split(","):
        results.append(run_fold(Path(args.data), speaker, extra, env, mix, args.lexicon))
        print(json.dumps(results[-1]), flush=True)
    mean = sum(r["word_acc"] for r in results) / len(results)
    print(json.dumps({"mean_word_acc": round(mean, 4), "overrides": extra}))


if __name__ == "__main__":
    main()
