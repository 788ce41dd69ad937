"""Time of one nlp/bert training step on this CPU under the knobs that change it: precision (32-true, bf16-mixed),
dropout (the encoder's own, 0) and attention (transformers' pick, eager), each against the default, side by side.

    python scripts/evidence/nlp_step_knobs.py                          # MiniLM, batch 32 x 32 tokens, 5 rounds
    python scripts/evidence/nlp_step_knobs.py --encoder mpnet --batch 32 --length 32 --rounds 5 --threads 2

One process builds every variant as a run does (zoo.nlp.module.SequenceClassifier with the run's dropout and
attention), then runs the variants in turn, a round at a time (round i starts at variant i, so no
variant always runs first): each times --steps steps of forward, backward, clipping at 1.0 and a foreach AdamW
step (as a zoo run on a CPU builds it) after --warmup untimed ones, and keeps the median step. The table gives each
variant's median step over the rounds and its ratio to the default in the same round: median and range.
Synthetic token ids with a full attention mask: what is timed is the arithmetic, not the data.
"""

from __future__ import annotations

import argparse
import time

from common import Spread, load1, this_command, write_record

VARIANTS = {  # name -> (autocast to bfloat16, dropout override, attention)
    "default (32-true)": (False, None, "auto"),
    "dropout 0, eager": (False, 0.0, "eager"),
    "bf16-mixed": (True, None, "auto"),
    "bf16-mixed, dropout 0, eager": (True, 0.0, "eager"),
}


def build(encoder: str, dropout: float | None, attention: str):
    """The Hugging Face model inside the task's module, built as a run builds it (in training mode)."""
    from zoo.nlp.module import SequenceClassifier

    return SequenceClassifier(encoder, pretrained=True, label_names=["0", "1"], dropout=dropout,
                              attention=attention).model


def step_time(model, optimizer, batch: dict, bf16: bool, steps: int, warmup: int) -> float:
    import torch

    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="minilm", help="alias, hub id or folder (default: minilm)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=32, help="tokens per sentence")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant and round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ids = torch.randint(1000, 20000, (args.batch, args.length))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (args.batch,))}
    names = list(VARIANTS)
    models = {n: build(args.encoder, d, a) for n, (_, d, a) in VARIANTS.items()}
    optimizers = {n: torch.optim.AdamW(m.parameters(), lr=1e-6, foreach=True) for n, m in models.items()}
    per_round: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        times = {n: step_time(models[n], optimizers[n], batch, VARIANTS[n][0], args.steps, args.warmup)
                 for n in order}
        per_round.append(times)
        print(f"round {r}: " + ", ".join(f"{n} {times[n] * 1000:.0f} ms" for n in names), flush=True)
    base = names[0]
    print(f"\n{args.encoder}, batch {args.batch} x {args.length} tokens, {args.threads} threads, "
          f"{args.rounds} rounds of {args.steps} steps\n")
    print("| variant | step ms (median) | / default: median (min, max) |")
    print("|---|---:|---|")
    for n in names:
        ms = Spread.of(t[n] * 1000 for t in per_round)
        ratio = Spread.of(t[n] / t[base] for t in per_round)
        print(f"| {n} | {ms.median:.0f} | {ratio.median:.3f} ({ratio.min:.3f}, {ratio.max:.3f}) |")
    # the nlp pages render the three switches' ratios from this record
    ratios = {n: Spread.of(t[n] / t[base] for t in per_round) for n in names}
    allthree, bf16, eager = (ratios[n] for n in ("bf16-mixed, dropout 0, eager", "bf16-mixed", "dropout 0, eager"))
    print("record:", write_record(
        f"nlp.step_knobs_all{'' if args.encoder == 'minilm' else '_' + args.encoder}", round(allthree.median, 3),
        metric=f"step time / the fp32 default's, bf16-mixed + dropout 0 + eager, median of {args.rounds} rounds",
        command=this_command(), load=f"{load1():.1f}",
        extra={"min": round(allthree.min, 3), "max": round(allthree.max, 3), "bf16": round(bf16.median, 3),
               "bf16_min": round(bf16.min, 3), "bf16_max": round(bf16.max, 3), "dropout_eager": round(eager.median, 3),
               "dropout_eager_min": round(eager.min, 3), "dropout_eager_max": round(eager.max, 3)}))


if __name__ == "__main__":
    main()
