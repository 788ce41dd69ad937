"""Probe: how well each layer of Whisper tiny.en's frozen encoder separates the ten FSDD digits of an unseen speaker.

    python scripts/evidence/whisper_layer_probe.py [--data ../shared/data/fsdd] [--lead 0.3] [--tail 0.3] [--pad-to 1.0]
        [--ckpt <a fold's checkpoint>]

The packaged encoder (speech.models.whisper, the zoo's own forward and front end) reads every file at 16 kHz, with
`--lead` / `--tail` seconds of silence before / after it (the model's `silence_lead` / `silence_tail`), the clip
(without the lead) padded with silence to `--pad-to` seconds; each layer's output is averaged over its frames, and a
logistic regression (standardised inputs, C=0.5) trained on three speakers classifies the fourth's 500 files
(leave-one-speaker-out). Prints one line per layer (0: the conv stem; the last layer through the final norm) with
each speaker's accuracy and the mean. A probe of the features, not the product: the product is the CTC recipe
(`experiment=speech_fsdd`, docs/speech.md). `--ckpt`: the encoder of an `experiment=speech_fsdd`
fold's checkpoint instead (fine-tuned on the other three speakers, with its own silence before and after), probed on
that fold's held-out speaker only: does the fine-tuned encoder still separate that speaker's digits, or does the
CTC head lose what the encoder holds?
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from common import SHARED, load1
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from whisper_zero_shot import held_out_speakers, packaged_whisper

from speech.audio import load_audio
from speech.module import CTCRecognizer

SPEAKERS = ["george", "jackson", "lucas", "nicolas"]


def pooled_layers(files: list[Path], tail: float, pad_to: float, lead: float = 0.0,
                  ckpt: str | None = None) -> np.ndarray:
    """(files, layers + 1, d_model): every layer's output averaged over the clip's frames (silence included)."""
    if ckpt:
        net = CTCRecognizer.load_from_checkpoint(ckpt, map_location="cpu", weights_only=True).model.eval()
    else:
        net = packaged_whisper(lead, tail)
    enc, layers = net.encoder, len(net.encoder.layers)
    rows = []
    with torch.inference_mode():
        for f in files:
            wave = load_audio(str(f), 16000)
            wave = F.pad(wave, (0, max(0, int(pad_to * 16000) - wave.shape[-1])))
            feats, frames = net.front(*net.with_silence(wave[None], torch.tensor([wave.shape[-1]])))
            stem = F.gelu(enc.conv2(F.gelu(enc.conv1(feats)))).transpose(1, 2)
            states, _ = enc.states(feats, frames, tuple(range(1, layers + 1)))
            rows.append(torch.stack([h[0].mean(0) for h in [stem, *states]]).numpy())
    return np.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    ap.add_argument("--lead", type=float, default=0.0, help="seconds of silence before each clip")
    ap.add_argument("--tail", type=float, default=0.0, help="seconds of silence after each clip")
    ap.add_argument("--pad-to", type=float, default=0.0, help="pad each clip with silence to this many seconds")
    ap.add_argument("--ckpt", help="a speech_fsdd fold's checkpoint: its encoder, its held-out speaker")
    args = ap.parse_args()
    torch.set_num_threads(1)
    files = sorted(Path(args.data).glob("*_*_*.wav"))
    if not files:
        raise SystemExit(f"no FSDD files in {args.data}: give --data <folder of {{digit}}_{{speaker}}_{{i}}.wav>")
    start = time.time()
    held_out = held_out_speakers(args.ckpt) if args.ckpt else SPEAKERS
    x = pooled_layers(files, args.tail, args.pad_to, args.lead, args.ckpt)
    speaker = np.array([f.stem.split("_")[1] for f in files])
    digit = np.array([int(f.stem.split("_")[0]) for f in files])
    for layer in range(x.shape[1]):
        accs = {}
        for held in held_out:
            train = ~np.isin(speaker, held_out if args.ckpt else [held])  # a fold's encoder: all its held-out
            scale = StandardScaler().fit(x[train, layer])
            clf = LogisticRegression(C=0.5, max_iter=3000).fit(scale.transform(x[train, layer]), digit[train])
            test = speaker == held
            accs[held] = round(float(clf.score(scale.transform(x[test, layer]), digit[test])), 3)
        print(json.dumps({"layer": layer, **accs, "mean": round(float(np.mean(list(accs.values()))), 4)}))
    print(json.dumps({"lead_s": args.lead, "tail_s": args.tail, "pad_to_s": args.pad_to, "ckpt": args.ckpt,
                      "files": len(files), "wall_s": round(time.time() - start, 1), "load": load1()}))


if __name__ == "__main__":
    main()
