"""Benchmark: read sentences of unseen speakers (speechocean762's train split) with `experiment=speech_so762`, beside
Whisper tiny.en zero-shot on the same files.

    python scripts/evidence/bench_speech_so762.py --out /tmp/so762 [--stages split,whisper,train,decode] [overrides ...]

split: so762's 125 speakers -> a held-out test set of --test-speakers unseen speakers (children and adults in their
share, `zoo.speech.splits.pick_speakers`, seed --seed) and the rest as the training manifest, from which the preset
carves its validation speakers itself (task.data.val_speakers); manifests go to --out (absolute audio paths), never
into the repository. whisper: tiny.en's packaged weights with its own decoder, greedy, no training, on the held-out
files, scored by the zoo's rule (speech/text.py): the bar. train: `python -m zoo train experiment=speech_so762` on
them, tested on the held-out speakers; wall time start to end with the load. decode: the best checkpoint's
emissions on the held-out files decoded greedy, by beam search, and by beam search with a word 3-gram LM built from
the training transcripts only (its weight and word score chosen on the validation speakers), and that decoder's
n-best rescored jointly with Whisper tiny.en (speech/rescore.py; its weights chosen there too). Each stage writes its
records (docs/results/records/speech.so762_*.json) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from common import SHARED, ZOO, load1, run, shown, write_record, zoo_env

PRESET = "speech_so762"
TAG = ""  # --tag: record ids speech.so762<tag>_..., so a second schedule keeps the first one's records


def rid(name: str) -> str:
    return f"speech.so762{TAG}_{name}"


def split(data: Path, out: Path, test_speakers: int, seed: int) -> dict:
    from zoo.speech.data import read_speaker_groups
    from zoo.speech.splits import pick_speakers

    groups = read_speaker_groups(str(data / "speakers.tsv"))
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines() if line.strip()]
    test = set(pick_speakers([r["speaker"] for r in rows], test_speakers, seed, groups))
    out.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[str]] = {"train": [], "test": []}
    for r in rows:
        r = {**r, "audio_filepath": str((data / r["audio_filepath"]).resolve())}
        parts["test" if r["speaker"] in test else "train"].append(json.dumps(r))
    for name, lines in parts.items():
        if name == "train":
            random.Random(seed).shuffle(lines)
        (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    kids = sorted(s for s in test if groups.get(s) == "children")
    return {"test_speakers": sorted(test), "test_children": len(kids), "test_adults": len(test) - len(kids),
            "test_files": len(parts["test"]), "train_files": len(parts["train"])}


def bench_command(stage: str) -> str:
    """This script's command line for one stage, as a reader types it (the output folder as <folder>)."""
    args, given = [], iter(sys.argv[1:])
    for arg in given:
        if arg in ("--out", "--stages"):
            next(given, None)
        elif not arg.startswith(("--out=", "--stages=")):
            args.append(arg)
    return " ".join(["python scripts/evidence/bench_speech_so762.py --out <folder>", f"--stages {stage}", *args])


def whisper(out: Path, threads: int) -> dict:
    from whisper_zero_shot import score_manifest

    res = score_manifest(out / "test.jsonl", threads)
    cmd = bench_command("whisper")
    load = f"{res['load_at_start']:.1f}->{res['load_at_end']:.1f}"
    extra = {"files": res["files"], "wall_s": res["wall_s"], "threads": threads,
             "scorer": "python scripts/evidence/whisper_zero_shot.py --manifest <folder>/test.jsonl"}
    write_record("speech.so762_whisper_tiny_wer", res["wer"], metric="WER, held-out speakers, Whisper tiny.en "
                 "zero-shot (its own decoder, greedy)", command=cmd, load=load, extra=extra)
    write_record("speech.so762_whisper_tiny_cer", res["cer"], metric="CER, held-out speakers, Whisper tiny.en "
                 "zero-shot (its own decoder, greedy)", command=cmd, load=load, extra=extra)
    return res


def train(data: Path, out: Path, extra: list[str], timeout: float) -> dict:
    cmd = [*ZOO, "train", f"experiment={PRESET}", f"task.data.train_manifest={out / 'train.jsonl'}",
           f"task.data.test_manifest={out / 'test.jsonl'}", f"task.data.speakers={data / 'speakers.tsv'}",
           "trainer.enable_progress_bar=false", *extra]
    r = run(cmd, env=zoo_env(OMP_NUM_THREADS="1"), timeout=timeout).check("training")
    m, best, folder = r.metrics(), r.printed("best checkpoint"), r.printed("run dir")
    (out / "best.txt").write_text(f"{best}\n")
    info = {"wall_s": round(r.wall, 1), "cpu_s": round(r.cpu, 1), "load": r.load, "best": best, "run_dir": folder,
            "metrics": m}
    load = r.load.removeprefix("load ")
    common = {"command": bench_command("train"), "preset": PRESET, "load": load}
    keep = {"wall_s": info["wall_s"], "cpu_s": info["cpu_s"], "test_cer": m.get("test/cer"),
            "zoo_command": shown(cmd).replace(str(out), "<folder>").replace(str(data), "<so762>")}
    own = "held-out speakers (the run's own decoding: task.module.decoder, then task.module.rescore if set)"
    write_record(rid("wer"), m["test/wer"], metric=f"WER, {own}", extra=keep, **common)
    write_record(rid("cer"), m["test/cer"], metric=f"CER, {own}", extra=keep, **common)
    for group in ("children", "adults"):
        if f"test/wer_{group}" in m:
            write_record(rid(f"wer_{group}"), m[f"test/wer_{group}"],
                         metric=f"WER, held-out {group} (the run's own decoder)", extra=keep, **common)
    write_record(rid("minutes"), round(r.wall / 60, 1), metric="training and testing, start to end",
                 unit="minutes", extra={**keep, "threads": 1}, **common)
    return info


def emissions(module, rows: list, batch: int = 8) -> list[tuple]:
    """(log-probs (T, V), frames) of each row's audio, computed once and decoded by every decoder."""
    import torch

    from zoo.speech.audio import load_audio

    out = []
    with torch.inference_mode():
        for start in range(0, len(rows), batch):
            waves = [load_audio(r.path, 16000) for r in rows[start:start + batch]]
            lengths = torch.tensor([len(w) for w in waves])
            padded = torch.zeros(len(waves), int(lengths.max()))
            for i, w in enumerate(waves):
                padded[i, : len(w)] = w
            logp, frames = module(padded, lengths)
            out += [(logp[i:i + 1, : int(frames[i])], frames[i:i + 1]) for i in range(len(waves))]
    return out


def decode_wer(decoder, emitted: list[tuple], refs: list[str]) -> tuple[float, float]:
    from zoo.speech.text import cer, wer

    hyps = [decoder(logp, n)[0] for logp, n in emitted]
    return wer(hyps, refs), cer(hyps, refs)


def decode(out: Path, lm_weights: list[float], word_scores: list[float]) -> dict:
    """Greedy, beam, and beam + the training transcripts' 3-gram LM on the held-out speakers; the LM's weight and
    word score chosen on the run's validation speakers (val_speakers.txt), never on the test files."""
    import torch

    from zoo.speech.decoding import BeamDecoder, greedy_decode
    from zoo.speech.manifest import read_manifest
    from zoo.speech.module import CTCRecognizer

    torch.set_num_threads(1)
    best = (out / "best.txt").read_text().strip()
    module = CTCRecognizer.load_from_checkpoint(best, map_location="cpu", weights_only=True).eval()
    tokens = module.vocab.tokens
    val_speakers = set((Path(best).parent.parent / "val_speakers.txt").read_text().split())
    val_rows = [r for r in read_manifest(str(out / "train.jsonl"), 30.0) if r.speaker in val_speakers]
    test_rows = read_manifest(str(out / "test.jsonl"), 30.0)
    start, load = time.time(), load1()
    val_em, test_em = emissions(module, val_rows), emissions(module, test_rows)
    val_refs, test_refs = [r.text for r in val_rows], [r.text for r in test_rows]
    lm = str(out / "lm_text_fit.txt")  # the transcripts trained on: the validation speakers' left out
    Path(lm).write_text("\n".join(r.text for r in read_manifest(str(out / "train.jsonl"), 30.0)
                                   if r.speaker not in val_speakers) + "\n")
    tried = {}
    for w in lm_weights:
        for ws in word_scores:
            dec = BeamDecoder(tokens, beam_size=20, lm_text=lm, lm_order=3, lm_weight=w, word_score=ws)
            tried[(w, ws)] = decode_wer(dec, val_em, val_refs)[0]
    w, ws = min(tried, key=tried.get)
    decoders = {"greedy": lambda e, n: greedy_decode(e, n, tokens), "beam": BeamDecoder(tokens, beam_size=20),
                "beam_lm": BeamDecoder(tokens, beam_size=20, lm_text=lm, lm_order=3, lm_weight=w, word_score=ws)}
    found = {"lm_weight": w, "word_score": ws, "val_wer_by_lm_setting": {f"{k[0]},{k[1]}": round(v, 4)
                                                                         for k, v in tried.items()}}
    cmd = bench_command("decode")
    for name, dec in decoders.items():
        rate, crate = decode_wer(dec, test_em, test_refs)
        found[name] = {"wer": round(rate, 4), "cer": round(crate, 4)}
        write_record(rid(f"wer_{name}"), round(rate, 4), metric=f"WER, held-out speakers, {name} decoding "
                     "of the benchmark's checkpoint", command=cmd, preset=PRESET, load=f"{load:.1f}->{load1():.1f}",
                     extra={"cer": round(crate, 4), "files": len(test_rows), "lm_weight": w, "word_score": ws})
    found["rescored"] = rescored(tokens, decoders["beam_lm"], (val_rows, val_em), (test_rows, test_em), cmd, load)
    found["wall_s"] = round(time.time() - start, 1)
    return found


def rescored(tokens: list[str], beam, val: tuple, test: tuple, cmd: str, load: float) -> dict:
    """Joint rescoring (speech/rescore.py) of the beam + LM decoder's n-best and the greedy path, with tiny.en's own
    transcript: both models' scores computed once per clip, the weights chosen on the validation speakers, then
    the held-out speakers scored with them; and tiny.en's decoder rescoring the n-best alone (no transcript of its
    own), to show what each part adds."""
    from zoo.speech.audio import load_audio
    from zoo.speech.decoding import greedy_decode
    from zoo.speech.rescore import JointRescorer, pick
    from zoo.speech.text import cer, wer

    rescorer = JointRescorer(tokens)

    def scored(rows: list, emitted: list) -> list[dict]:
        out = []
        for r, (logp, n) in zip(rows, emitted, strict=True):
            cands = [*beam.nbest(logp, n)[0], greedy_decode(logp, n, tokens)[0]]
            out += rescorer.scores([load_audio(r.path, 16000)], logp, n, [cands])
        return out

    def chosen(clips: list[dict], w: float, bonus: float, own: bool = True) -> list[str]:
        hyps = []
        for c in clips:
            keep = len(c["candidates"]) - (0 if own or not c["whisper_only"] else 1)
            pos = pick(c["ctc"][:keep], c["whisper"][:keep], c["words"][:keep], w, bonus) if keep else None
            hyps.append("" if pos is None else c["candidates"][pos])
        return hyps

    (val_rows, val_em), (test_rows, test_em) = val, test
    val_s, test_s = scored(val_rows, val_em), scored(test_rows, test_em)
    val_refs, test_refs = [r.text for r in val_rows], [r.text for r in test_rows]
    found = {}
    for own, name in ((True, "rescored"), (False, "rescored_nbest_only")):
        grid = {(w, b): wer(chosen(val_s, w, b, own), val_refs) for w in (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
                for b in (-4.0, -3.0, -2.0, -1.0, 0.0, 1.0)}
        w, b = min(grid, key=grid.get)
        hyps = chosen(test_s, w, b, own)
        rate, crate = round(wer(hyps, test_refs), 4), round(cer(hyps, test_refs), 4)
        found[name] = {"wer": rate, "cer": crate, "ctc_weight": w, "word_bonus": b, "val_wer": round(grid[w, b], 4)}
        what = ("the beam + LM n-best, the greedy path and tiny.en's own transcript" if own else
                "the beam + LM n-best and the greedy path (no transcript of tiny.en's own)")
        write_record(rid(f"wer_{name}"), rate, metric=f"WER, held-out speakers, {what} rescored jointly with "
                     "Whisper tiny.en (speech/rescore.py), weights chosen on the validation speakers", command=cmd,
                     preset=PRESET, load=f"{load:.1f}->{load1():.1f}",
                     extra={"cer": crate, "files": len(test_rows), "ctc_weight": w, "word_bonus": b,
                            "val_wer": round(grid[w, b], 4)})
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "so762"))
    ap.add_argument("--out", required=True, help="a folder outside the repository for manifests and notes")
    ap.add_argument("--stages", default="split,whisper,train,decode")
    ap.add_argument("--test-speakers", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="Whisper zero-shot's torch threads")
    ap.add_argument("--timeout", type=float, default=90 * 60)
    ap.add_argument("--tag", default="", help="record ids speech.so762<tag>_... (e.g. _3ep) for another schedule")
    args, overrides = ap.parse_known_args()
    global TAG
    TAG = args.tag
    data, out = Path(args.data), Path(args.out).resolve()
    for stage in args.stages.split(","):
        start, load = time.time(), load1()
        if stage == "split":
            res = split(data, out, args.test_speakers, args.seed)
        elif stage == "whisper":
            res = whisper(out, args.threads)
        elif stage == "train":
            res = train(data, out, overrides, args.timeout)
        elif stage == "decode":
            res = decode(out, [0.5, 1.0, 1.5, 2.0, 3.0], [0.0, 1.0, 2.0])
        else:
            raise SystemExit(f"unknown stage {stage}: split, whisper, train or decode")
        print(json.dumps({"stage": stage, **res, "stage_s": round(time.time() - start, 1), "load_at_start": load,
                          "load_at_end": load1()}), flush=True)


if __name__ == "__main__":
    main()
