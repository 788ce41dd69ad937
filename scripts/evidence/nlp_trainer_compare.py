"""nlp/bert beside transformers' `Trainer`: the same fine-tune through `python -m zoo train` and through `Trainer`,
in alternated pairs; wall time per training step and dev accuracy of each, median and range.

The commands behind docs/results/nlp.md's comparison tables (2 cores; the load is printed per run):

    pip install --target /tmp/hf_extra --no-deps "accelerate>=1.1" psutil   # Trainer needs them; the zoo does not
    PYTHONPATH=/tmp/hf_extra python scripts/evidence/nlp_trainer_compare.py --encoder minilm --data subj \
        --steps 100 --pairs 5 --threads 1
    PYTHONPATH=/tmp/hf_extra python scripts/evidence/nlp_trainer_compare.py --encoder mpnet --data cr \
        --steps 50 --pairs 5 --freeze-layers 8 --threads 2   # the idle machine
    # and the same with --steps 94 (a full epoch of CR)

Both sides get the same encoder folder (zoo.nlp.models.hub.resolve), the same rows (zoo.nlp.files.read_rows) and
token ids (zoo.nlp.data.tokenize: no padding, truncated at --max-length), batch size, AdamW (lr, betas, eps,
weight decay 0.01 off biases and LayerNorm), linear schedule with 10% warm-up, gradient clipping at 1.0, `--steps`
optimiser steps, length-grouped batches padded to their own longest sentence (the zoo's sampler; Trainer's
`train_sampling_strategy="group_by_length"` with DataCollatorWithPadding), the same freezing (--freeze-layers), and
`--threads` torch threads (OMP_NUM_THREADS and torch.set_num_threads). Each side runs in its own process; pair i runs
the zoo first when i is even and Trainer first when i is odd. Time per step: the zoo's fit time minus its validation
and checkpoint writing (from its `zoo: time:` line) over the steps; Trainer's `train_runtime` over the steps. Dev
accuracy: the zoo's val/acc at the last step; Trainer's `evaluate()` after training. Known difference: the zoo's
warm-up starts at lr/warm at step 0, Trainer's at 0 (one step of warm-up apart).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from common import SHARED, ZOO_MODULE, Spread, csv_series, load1, run, shown, this_command, write_record, zoo_env

MARK = "TRAINER_RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--encoder", default="minilm", help="alias, hub id or folder (minilm, mpnet)")
    ap.add_argument("--data", default="subj", choices=["cr", "subj"], help="../shared/data/text/<data>")
    ap.add_argument("--steps", type=int, default=100, help="optimiser steps per run (at most one epoch)")
    ap.add_argument("--pairs", type=int, default=5, help="alternated (zoo, Trainer) pairs")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--freeze-layers", type=int, default=0, help="embeddings and the bottom N layers frozen")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, the same on both sides")
    ap.add_argument("--seed", type=int, default=0, help="pair i uses seed + i on both sides")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per run before it is killed")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the Trainer side, in its own process
    return ap.parse_args(argv)


def data_files(data: str) -> tuple[Path, Path]:
    base = SHARED / "text" / data
    return base / "train.tsv", base / "dev.tsv"


# --- the zoo side ------------------------------------------------------------------------------------------------
def zoo_run(a: argparse.Namespace, seed: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="nlp_cmp_zoo_"))
    cmd = [*ZOO_MODULE, "train", f"experiment=nlp_{a.data}", f"task.module.encoder={a.encoder}", f"seed={seed}",
           f"task.data.batch_size={a.batch_size}", f"task.data.max_length={a.max_length}",
           f"task.module.optimizer.lr={a.lr}", f"task.module.freeze_layers={a.freeze_layers}",
           "task.module.freeze_embeddings=false", f"trainer.max_steps={a.steps}", "trainer.max_epochs=-1",
           f"trainer.val_check_interval={a.steps}", f"trainer.num_threads={a.threads}",
           "logger=csv", "test_after_fit=false", "task.module.export_hf=false", "task.module.worst_k=0",
           "callbacks.model_checkpoint=null", "callbacks.last_checkpoint=null",
           "trainer.enable_progress_bar=false", "callbacks.progress_bar=null", "trainer.enable_model_summary=false",
           "trainer.num_sanity_val_steps=0"]
    env = zoo_env(ZOO_OUTPUT_ROOT=str(out), ZOO_SHARED_DATA=str(SHARED), OMP_NUM_THREADS=str(a.threads))
    done = run(cmd, env=env, timeout=a.timeout)
    line = re.search(r"zoo: time: .*fit ([\d.]+) \(validation ([\d.]+), checkpoints ([\d.]+)\)", done.output)
    files = sorted(out.rglob("metrics.csv"))
    if not done.ok or line is None or not files:
        raise SystemExit(f"zoo run failed ({done.status}):\n{done.output[-3000:]}")
    fit, val, ckpt = (float(x) for x in line.groups())
    acc = csv_series(files[0])["val/acc"][-1]
    return {"side": "zoo", "sec_per_step": (fit - val - ckpt) / a.steps, "acc": acc, "load": done.load,
            "cmd": shown(cmd)}


# --- the Trainer side --------------------------------------------------------------------------------------------
def _features(tokenizer, path: Path, max_length: int) -> list[dict]:
    from zoo.nlp.data import tokenize
    from zoo.nlp.files import read_rows

    rows = read_rows(path, text_column=1, label_column=0)
    feats, _ = tokenize(tokenizer, rows, max_length)
    return [{"input_ids": f["input_ids"], "attention_mask": [1] * len(f["input_ids"]), "labels": int(r["label"])}
            for f, r in zip(feats, rows, strict=True)]


def _training_args(a: argparse.Namespace, out: str):
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=out, max_steps=a.steps, per_device_train_batch_size=a.batch_size, per_device_eval_batch_size=64,
        learning_rate=a.lr, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        lr_scheduler_type="linear", warmup_steps=0.1, max_grad_norm=1.0, train_sampling_strategy="group_by_length",
        eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none", use_cpu=True,
        dataloader_num_workers=0, seed=a.seed, disable_tqdm=True)


def trainer_worker(a: argparse.Namespace) -> None:
    """Fine-tune with transformers' Trainer and print one JSON line (time per step, dev accuracy)."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer

    from zoo.nlp.models import freeze
    from zoo.nlp.models.hub import load_tokenizer, quiet_load, resolve

    torch.set_num_threads(a.threads)
    folder = resolve(a.encoder).location
    tokenizer = load_tokenizer(a.encoder)
    train_file, dev_file = data_files(a.data)
    train, dev = _features(tokenizer, train_file, a.max_length), _features(tokenizer, dev_file, a.max_length)
    with quiet_load():
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)
    if a.freeze_layers:
        freeze(model, True, a.freeze_layers, model.config.num_hidden_layers)
    accuracy = lambda p: {"acc": float((np.argmax(p.predictions, -1) == p.label_ids).mean())}  # noqa: E731
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(model=model, args=_training_args(a, out), train_dataset=train, eval_dataset=dev,
                          data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy)
        runtime = trainer.train().metrics["train_runtime"]
        acc = trainer.evaluate()["eval_acc"]
    print(MARK + json.dumps({"sec_per_step": runtime / a.steps, "acc": acc}), flush=True)


def hf_run(a: argparse.Namespace, seed: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--encoder", a.encoder, "--data", a.data,
           "--steps", str(a.steps), "--batch-size", str(a.batch_size), "--max-length", str(a.max_length),
           "--lr", str(a.lr), "--freeze-layers", str(a.freeze_layers), "--threads", str(a.threads),
           "--seed", str(seed)]
    done = run(cmd, env=zoo_env(OMP_NUM_THREADS=str(a.threads), HF_HUB_OFFLINE="1"), timeout=a.timeout)
    found = [line for line in done.output.splitlines() if line.startswith(MARK)]
    if not done.ok or not found:
        raise SystemExit(f"Trainer run failed ({done.status}):\n{done.output[-3000:]}")
    return {"side": "Trainer", **json.loads(found[-1][len(MARK):]), "load": done.load, "cmd": shown(cmd)}


# --- pairs and the table -----------------------------------------------------------------------------------------
def report(rows: list[dict], a: argparse.Namespace) -> None:
    zoo = [r for r in rows if r["side"] == "zoo"]
    hf = [r for r in rows if r["side"] == "Trainer"]
    ratio = Spread.of(z["sec_per_step"] / h["sec_per_step"] for z, h in zip(zoo, hf, strict=True))
    gap = Spread.of(100 * (z["acc"] - h["acc"]) for z, h in zip(zoo, hf, strict=True))
    print(f"\n{a.encoder} on {a.data}: {a.steps} steps, batch {a.batch_size}, max_length {a.max_length}, lr {a.lr}, "
          f"freeze_layers {a.freeze_layers}, {a.threads} threads, {len(zoo)} pairs")
    print("| side | s/step | dev acc |\n|---|---|---|")
    for name, side in (("zoo", zoo), ("Trainer", hf)):
        print(f"| {name} | {Spread.of(r['sec_per_step'] for r in side).median_range('.3f')} | "
              f"{Spread.of(r['acc'] for r in side).median_range('.4f')} |")
    print(f"| zoo / Trainer time per step | {ratio.median_range('.3f')} | |")
    print(f"| zoo - Trainer dev acc (points) | | {gap.median_range('+.2f')} |")
    print(f"# zoo: {zoo[0]['cmd']}\n# Trainer: {hf[0]['cmd']}")
    accs = {name: Spread.of(r["acc"] for r in side).median for name, side in (("zoo", zoo), ("trainer", hf))}
    # README and the nlp pages render the ratio from this record, one per encoder, data set and step count
    print("record:", write_record(
        f"nlp.trainer_ratio_{a.encoder}_{a.data}_{a.steps}", round(ratio.median, 3),
        metric=f"time per step, zoo / transformers' Trainer, median of {ratio.n} alternated pairs",
        command=this_command(), load=", ".join(r["load"] for r in rows),
        extra={"min": round(ratio.min, 3), "max": round(ratio.max, 3), "pairs": ratio.n, "zoo_acc": accs["zoo"],
               "trainer_acc": accs["trainer"], "gap_points": round(gap.median, 2)}))


def main() -> None:
    a = parse_args()
    if a.worker:
        return trainer_worker(a)
    missing = [p for p in data_files(a.data) if not p.is_file()]
    if missing:
        raise SystemExit(f"nlp_trainer_compare: {missing[0]} not found (set ZOO_SHARED_DATA)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    for i in range(a.pairs):
        sides = (zoo_run, hf_run) if i % 2 == 0 else (hf_run, zoo_run)
        for side in sides:
            r = side(a, a.seed + i)
            rows.append(r)
            print(f"pair {i} {r['side']:7s} {r['sec_per_step']:.3f} s/step acc {r['acc']:.4f} {r['load']} "
                  f"(load now {load1():.1f})", flush=True)
    report(rows, a)


if __name__ == "__main__":
    main()
