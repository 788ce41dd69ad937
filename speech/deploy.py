"""Export and serving hooks for speech/ctc (found by zoo/kit/hooks.py; called by `zoo export` and `zoo serve`).

Exported graph: log-Mel features (B, n_mels, F) float32 + frame counts (B,) int64 -> CTC log-probs (B, T', V) +
output lengths (B,). The waveform front end stays outside the graph: torch.stft does not export with either ONNX
exporter here (the TorchScript-based one fails on torchaudio's Spectrogram reshape, the dynamo one on the packed
LSTM), so model.json describes the features exactly (STFT, mel filterbank, log, per-utterance normalisation) and
`zoo serve` computes them with the checkpoint's own LogMel. The recurrent model exports with the TorchScript-based
exporter, which maps pack_padded_sequence onto ONNX's LSTM sequence lengths (max abs diff ~1e-7, measured).
ExportedProgram is not offered: torch.export fails on the packed sequence as well.

An HF encoder (arch wav2vec2/hubert/wavlm) takes the waveform itself: its graph is waveform (B, T) float32 + sample
counts (B,) int64 -> the same two outputs, per-utterance normalisation included; nothing is computed outside it.
The Whisper encoder (arch whisper) takes the 16 kHz waveform too: its log-Mel front end is a strided convolution with
a DFT basis (speech/whisper_frontend.py), so it is inside the graph, and the length stays dynamic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import Budget, Examples, Graph, compare

log = logging.getLogger(__name__)

FORMATS = ("onnx", "torchscript")
WHY_NOT = {"exported_program": "torch.export cannot trace the packed LSTM"}
EXPORTER = "torchscript"
TOLERANCE = 1e-3  # on log-probs


class _Acoustic(torch.nn.Module):
    """The acoustic model and its log-softmax: log-Mel features + frames, or (an HF encoder) waveform + samples."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.model = module.model

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, out_lengths = self.model(inputs, lengths)
        return logits.float().log_softmax(-1), out_lengths


@dataclass
class Refs:
    """A batch's reference texts and the vocabulary; sliced like the batch's inputs (an int8 export holds some
    examples apart from its calibration)."""

    texts: list[str]
    tokens: list[str]

    def __getitem__(self, part: slice) -> Refs:
        return Refs(self.texts[part], self.tokens)


def _takes_wave(module: Any) -> bool:
    return bool(getattr(module.model, "takes_wave", False))


def export_graph(module: Any) -> Graph:
    if _takes_wave(module):
        return Graph(_Acoustic(module), ["wave", "lengths"], ["log_probs", "out_lengths"],
                     {"wave": {0: "batch", 1: "samples"}, "lengths": {0: "batch"},
                      "log_probs": {0: "batch", 1: "out_frames"}, "out_lengths": {0: "batch"}})
    return Graph(_Acoustic(module), ["features", "frames"], ["log_probs", "out_lengths"],
                 {"features": {0: "batch", 2: "frames"}, "frames": {0: "batch"},
                  "log_probs": {0: "batch", 1: "out_frames"}, "out_lengths": {0: "batch"}})


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    """Up to n validation utterances, through the checkpoint's own front end."""
    from zoo.core.build import build_checked_data

    data = build_checked_data(cfg, module)
    data.prepare_data()
    data.setup("validate")
    out, seen = [], 0
    with torch.inference_mode():
        for batch in data.val_dataloader():
            k = min(len(batch["lengths"]), n - seen)
            if _takes_wave(module):
                inputs = (batch["wave"][:k].contiguous(), batch["lengths"][:k])
            else:
                feats, frames = module.features(batch["wave"][:k], batch["lengths"][:k])
                inputs = (feats.contiguous(), frames)
            out.append(Examples(inputs, Refs(list(batch["texts"][:k]), list(module.vocab.tokens))))
            seen += k
            if seen >= n:
                break
    return out


def metadata(module: Any, cfg: Any) -> dict:
    hp, mel = module.hparams, module.features.mel
    spec = mel.spectrogram
    post = {"greedy": "argmax per frame up to out_lengths, merge repeats, drop the blank (index 0), join the tokens, "
                      "collapse spaces"}
    if _takes_wave(module):
        inside = ("Whisper log-Mel features (n_fft 400, hop 160, 80 bins, log10, max-8 clamp, (x+4)/4), inside "
                  "the graph" if hp.arch == "whisper" else "inside the graph")
        return {"preprocess": {"input": "waveform", "sample_rate": hp.sample_rate, "mono": True,
                               "padding": "zeros after each utterance; lengths = real samples",
                               "normalization": inside, "max_seconds": module.max_seconds()},
                "vocabulary": list(module.vocab.tokens), "blank_index": 0, "postprocess": post}
    return {
        "preprocess": {
            "input": "log-Mel features, not the waveform (torch.stft does not export; see speech/deploy.py)",
            "sample_rate": hp.sample_rate, "mono": True, "n_mels": hp.n_mels, "n_fft": spec.n_fft,
            "win_length": spec.win_length, "hop_length": spec.hop_length, "window": "hann (periodic)",
            "center": True, "pad_mode": "reflect", "power": 2.0, "mel_scale": "htk", "mel_norm": None,
            "f_min": 0.0, "f_max": hp.sample_rate / 2,
            "log": "ln(mel + 1e-6)",
            "normalization": ("per utterance and mel bin" if module.features.norm == "bin" else
                              "per utterance, one mean and variance over all mel bins") +
                             " over the real frames: (x - mean) / sqrt(var + 1e-5); padding frames set to 0",
            "frames": "samples // hop_length + 1", "max_seconds": module.max_seconds(),
        },
        "vocabulary": list(module.vocab.tokens), "blank_index": 0,
        "postprocess": post,
    }


def extra_files(module: Any) -> dict[str, bytes]:
    return {}


def transcripts(log_probs: np.ndarray, lengths: np.ndarray, tokens: list[str]) -> list[str]:
    from zoo.speech.decoding import greedy_decode

    return greedy_decode(torch.from_numpy(log_probs), torch.from_numpy(lengths), tokens)


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    a, b = ref[0].argmax(-1), out[0].argmax(-1)  # greedy paths: equal paths give equal transcripts
    same = [np.array_equal(a[i, :n], b[i, :n]) for i, n in enumerate(ref[1])]
    return compare(ref, out, TOLERANCE, float(np.mean(same)))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> tuple[str, float]:
    """Character error rate of the greedy transcripts against the reference texts."""
    from torchmetrics.functional.text import char_error_rate

    hyps = [h for o, t in zip(outputs, targets) for h in transcripts(o[0], o[1], t.tokens)]
    refs = [r for t in targets for r in t.texts]
    return "cer", float(char_error_rate(hyps, refs))


# ---------------------------------------------------------------------------------------------- serving
class Handler:
    """POST /predict with a wav/flac upload (mono or mixed down; resampled to the model's rate) -> transcript."""

    content_types = ("audio/", "application/octet-stream")
    pad = {"features": 0.0, "frames": 0}

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        from zoo.speech.features import LogMel

        pre = meta["preprocess"]
        self.rate = int(pre["sample_rate"])
        self.wave_input = pre.get("input") == "waveform"  # an HF encoder: the graph takes the samples
        if self.wave_input:
            self.pad = {"wave": 0.0, "lengths": 0}
            self.front = None
        else:
            self.front = module.features if module is not None else LogMel(self.rate, int(pre["n_mels"]))
        self.tokens = meta["vocabulary"]
        self.max_seconds = float(pre.get("max_seconds", 60.0))
        self.whisper = "Whisper" in str(pre.get("normalization", ""))

    def calibrate(self, infer: Any) -> None:
        """An exported Whisper graph adds its silence to every clip inside the graph, so it takes less than its 30 s
        window; exports made before model.json recorded that still say 30 s, and a clip just under it failed inside
        the runtime (HTTP 500). Probe the graph once at the recorded limit and, where it fails, find to 10 ms what
        it takes, so such a clip gets the 422 a too-long one gets. Only an export that recorded the whole window can
        be stale: one that adds silence records less since, and is served without a probe."""
        from zoo.speech.models.whisper import WINDOW_SECONDS

        if not (self.whisper and self.wave_input) or self.max_seconds < WINDOW_SECONDS:
            return

        def takes(n: int) -> bool:
            try:
                infer({"wave": np.zeros((1, n), np.float32), "lengths": np.array([n], np.int64)})
                return True
            except Exception:  # noqa: BLE001 - onnxruntime's and torch's shape errors share no base class
                return False

        fails = int(self.max_seconds * self.rate)
        if takes(fails):
            return
        ok = fails - 2 * self.rate  # Whisper's silence is a second or less: 2 s below, the window holds
        if not takes(ok):
            return
        while fails - ok > self.rate // 100:
            mid = (ok + fails) // 2
            ok, fails = (mid, fails) if takes(mid) else (ok, mid)
        log.warning("this export says it takes %g s, but its graph (with the silence it adds) takes %.2f s: clips "
                    "longer get a 422; export the checkpoint again to record it", self.max_seconds, ok / self.rate)
        self.max_seconds = ok / self.rate

    def decode(self, body: bytes, content_type: str, budget: Budget | None = None) -> dict[str, np.ndarray]:
        """One clip (a multipart upload of several comes here once per file, with the request's budget). Its length
        is read from the header and checked before a sample is decoded: a compressed file (FLAC of silence) can
        hold hours of audio in a small body."""
        import io

        import soundfile as sf

        from zoo.kit.deploy import BadRequest

        budget = budget or Budget()
        budget.items(1, "clips")
        try:
            with sf.SoundFile(io.BytesIO(body)) as f:
                rate, seconds = f.samplerate, f.frames / max(f.samplerate, 1)
                self.check_length(seconds)
                budget.take("audio_s", seconds, "seconds of audio")
                # mixed down block by block: a many-channel file never sits in memory whole
                blocks = [b.mean(1) for b in f.blocks(65536, dtype="float32", always_2d=True)]
        except BadRequest:
            raise
        except Exception as e:  # noqa: BLE001 - soundfile raises LibsndfileError, RuntimeError, TypeError
            raise BadRequest(400, f"cannot decode the audio ({type(e).__name__}); send a wav or flac file") from None
        wave = torch.from_numpy(np.concatenate(blocks) if blocks else np.zeros(0, np.float32))
        if not torch.isfinite(wave).all():  # a float file holding NaN or inf: the transcript would be silently empty
            raise BadRequest(422, "the audio holds NaN or inf samples; send finite samples (re-export the file)")
        self.check_length(len(wave) / rate)  # what was read, should the header have said otherwise
        if rate != self.rate:
            import torchaudio

            wave = torchaudio.functional.resample(wave, rate, self.rate)
        if self.wave_input:
            return {"wave": wave[None].float().numpy(), "lengths": np.array([len(wave)], dtype=np.int64)}
        with torch.inference_mode():
            feats, frames = self.front(wave[None], torch.tensor([len(wave)]))
        return {"features": feats.numpy(), "frames": frames.numpy()}

    def check_length(self, seconds: float) -> None:
        from zoo.kit.deploy import BadRequest

        if seconds <= 0:
            raise BadRequest(422, f"the audio is empty (no samples); send speech up to {self.max_seconds:g} s")
        if seconds > self.max_seconds:
            raise BadRequest(422, f"audio of {seconds:.1f} s is longer than the {self.max_seconds:g} s this "
                                  "model takes; split it into shorter clips")

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        return {"text": transcripts(outputs[0], outputs[1], self.tokens)[0]}
