"""Quick probe of what makes a new FSDD voice recognisable: a 10-word classifier, minutes per fold, not the product.

    python scripts/evidence/fsdd_word_probe.py --hold lucas [--synth N --corpus <eSpeak corpus>] [--epochs E] ...

The zoo's own front end and augmentation (speech.features.LogMel with VTLP/pitch, speech.augment.WaveAugment, speed
perturbation, SpecAugment) feed the zoo's Conv2d subsampling + a 2-layer BiLSTM (bilstm_small's encoder) pooled by
attention into 10 classes, trained with cross-entropy in a plain loop (no Lightning, one thread). Splits as
`experiment=speech_fsdd_scratch`: test = every file of the held-out speaker, val = the others' index 0-4. It answers
"does this change help an unseen speaker?" quickly (15 epochs of FSDD alone: about 70 s); what it finds is then
measured with the real preset (docs/speech.md). Run it by path, like the other evidence scripts. Prints val and
held-out accuracy per epoch and the last epoch's confusion matrix.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import SHARED  # puts the repository root on sys.path for speech.*
from torch import nn

from speech.audio import load_audio, resampler
from speech.augment import WaveAugment
from speech.features import LogMel, SpecAugment
from speech.fsdd import NAMES, scan
from speech.manifest import read_manifest
from speech.models.subsample import Conv2dSubsample
from zoo.errors import ZooError

RATE = 8000


def args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(SHARED / "fsdd"))
    p.add_argument("--hold", default="lucas", help="the held-out speaker")
    p.add_argument("--synth", type=int, default=0, help="eSpeak digit utterances mixed into training (0: none)")
    p.add_argument("--corpus", default=None, help="an eSpeak corpus folder (speech/synth.py) at 8 kHz")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--vtlp", type=float, default=0.12)
    p.add_argument("--pitch", type=float, default=3.0)
    p.add_argument("--tilt", type=float, default=3.0)
    p.add_argument("--speed", default="0.85,0.9,0.95,1.0,1.05,1.1,1.15")
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--rir", type=float, default=0.3)
    p.add_argument("--pad", type=float, default=0.0, help="up to this many seconds of faint noise at each end")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class WordClassifier(nn.Module):
    def __init__(self, n_mels: int = 40, hidden: int = 128, dropout: float = 0.15) -> None:
        super().__init__()
        self.sub = Conv2dSubsample(n_mels, hidden, 32, dropout, norm=True)
        self.rnn = nn.LSTM(hidden, hidden, 2, batch_first=True, bidirectional=True, dropout=dropout)
        self.att = nn.Linear(2 * hidden, 1)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * hidden, len(NAMES)))

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        x, lengths = self.sub(feats, frames)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=x.shape[1])
        real = torch.arange(y.shape[1])[None] < lengths[:, None]
        w = self.att(y).squeeze(-1).masked_fill(~real, -1e9).softmax(-1)
        return self.head((w.unsqueeze(-1) * y).sum(1))


def load(a: argparse.Namespace) -> dict[str, list[tuple[torch.Tensor, int]]]:
    rows: dict[str, list] = {"train": [], "val": [], "test": []}
    try:
        files = scan(a.data)
    except ZooError as e:
        sys.exit(str(e))
    for path, digit, speaker, index in files:
        split = "test" if speaker == a.hold else ("val" if index < 5 else "train")
        rows[split].append((load_audio(path, RATE), digit))
    if not rows["test"]:
        sys.exit(f"no files of speaker {a.hold!r} in {a.data}")
    if a.synth:
        if not a.corpus:
            sys.exit("--synth needs --corpus <eSpeak corpus folder at 8 kHz>")
        synth = [u for u in read_manifest(str(Path(a.corpus) / "train.jsonl")) if u.text in NAMES][: a.synth]
        rows["train"] += [(load_audio(u.path, RATE), NAMES.index(u.text)) for u in synth]
    return rows


def main() -> None:
    a = args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    rows = load(a)
    print({k: len(v) for k, v in rows.items()}, flush=True)
    speeds = [float(x) for x in a.speed.split(",")] if a.speed else []
    wave_aug = WaveAugment(RATE, tilt_prob=0.5 if a.tilt else 0.0, tilt_db_per_octave=a.tilt or 1.0,
                           rir_prob=a.rir, rt60=(0.1, 0.4), noise_prob=a.noise, snr_db=(10, 40))
    voice = {"vtlp": a.vtlp, "pitch_semitones": a.pitch, "pitch_prob": 0.5} if (a.vtlp or a.pitch) else None
    front, mask = LogMel(RATE, 40, voice=voice), SpecAugment(2, 8, 2, 10, 0.15)
    net = WordClassifier()
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=1e-2)
    steps = a.epochs * math.ceil(len(rows["train"]) / a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=steps, pct_start=0.1)
    parts = (net, front, mask, wave_aug)

    def batch(items: list, train: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        waves = []
        for w, _ in items:
            if train and speeds and (f := random.choice(speeds)) != 1.0:
                w = resampler(RATE, int(round(RATE * f)))(w)
            if train and a.pad:  # faint noise 30-60 dB below the speech at each end
                level = w.pow(2).mean().sqrt() * 10 ** (-random.uniform(30, 60) / 20)
                w = torch.cat([torch.randn(int(random.uniform(0, a.pad) * RATE)) * level, w,
                               torch.randn(int(random.uniform(0, a.pad) * RATE)) * level])
            waves.append(wave_aug(w) if train else w)
        lengths = torch.tensor([len(w) for w in waves])
        return nn.utils.rnn.pad_sequence(waves, batch_first=True), lengths, torch.tensor([y for _, y in items])

    def evaluate(split: str) -> tuple[float, torch.Tensor]:
        for m in parts:
            m.eval()
        preds = []
        with torch.no_grad():
            for i in range(0, len(rows[split]), 100):
                x, lengths, _ = batch(rows[split][i:i + 100], False)
                preds.append(net(*front(x, lengths)).argmax(-1))
        pred = torch.cat(preds)
        truth = torch.tensor([y for _, y in rows[split]])
        return float((pred == truth).float().mean()), torch.stack([truth, pred])

    t0 = time.time()
    for epoch in range(a.epochs):
        for m in parts:
            m.train()
        random.shuffle(rows["train"])
        for i in range(0, len(rows["train"]), a.batch):
            x, lengths, y = batch(rows["train"][i:i + a.batch], True)
            feats, frames = front(x, lengths)
            loss = F.cross_entropy(net(mask(feats, frames), frames), y, label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
        val, _ = evaluate("val")
        test, pairs = evaluate("test")
        print(f"epoch {epoch} val {val:.3f} held-out {a.hold} {test:.3f} ({time.time() - t0:.0f} s)", flush=True)
    confusion = torch.zeros(10, 10, dtype=torch.long)
    confusion.index_put_((pairs[0], pairs[1]), torch.ones(pairs.shape[1], dtype=torch.long), accumulate=True)
    print("confusion (rows: spoken, columns: heard)\n" + str(confusion))


if __name__ == "__main__":
    main()
