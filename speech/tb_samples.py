"""Validation examples to TensorBoard each epoch: audio, log-Mel image, reference vs hypothesis."""

from __future__ import annotations

import torch

from zoo.kit import tb


def log_examples(module, examples: list[dict]) -> None:
    rate = module.hparams.sample_rate
    rows = ["| # | reference | hypothesis |", "|---|---|---|"]
    for i, ex in enumerate(examples):
        tb.log_audio(module, f"val_examples/audio_{i}", ex["wave"], rate)
        with torch.no_grad():
            wave = ex["wave"].to(module.device)[None]
            feats, _ = module.features(wave, torch.tensor([wave.shape[1]], device=module.device))
        img = feats[0].flip(0).cpu()  # low frequencies at the bottom
        img = (img - img.min()) / (img.max() - img.min() + 1e-6)
        tb.log_image(module, f"val_examples/logmel_{i}", img[None])
        rows.append(f"| {i} | {ex['ref']} | {ex['hyp']} |")
    tb.log_text(module, "val_examples/text", "\n".join(rows))
