"""Self-supervised speech encoders from `transformers` (wav2vec2, HuBERT, WavLM) with the zoo's vocabulary as the
CTC head: `task.module.arch=wav2vec2 task.module.pretrained=<hub id or folder>`.

The waveform goes in (no log-Mel front end: the encoder has its own convolutional feature extractor), normalised
per utterance over its real samples as the models' feature extractors do (`do_normalize`). The encoder's own
SpecAugment-style masking (`mask_time_prob`, `mask_feature_prob`) runs in training only; set it through
`task.module.model={mask_time_prob: 0.05}` (any config field). The encoder config travels with the checkpoint
(`encoder_config` in hparams), so `load_from_checkpoint` rebuilds the model without network or source folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.errors import ZooError

log = logging.getLogger(__name__)

# arch name -> transformers model_type (the CTC class comes from AutoModelForCTC)
FAMILIES = {"wav2vec2": "wav2vec2", "hubert": "hubert", "wavlm": "wavlm"}
# Checkpoints these archs are usually fine-tuned from (need network, or a folder saved with save_pretrained).
KNOWN = {"wav2vec2": "facebook/wav2vec2-base", "hubert": "facebook/hubert-base-ls960",
         "wavlm": "microsoft/wavlm-base-plus"}
# A few-kilobyte encoder for tests and dry runs: 2 layers, 32 wide, 3 small convolutions (stride 5*4*4 = 80: one
# frame per 5 ms at 16 kHz).
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "conv_dim": [16, 16, 16], "conv_stride": [5, 4, 4], "conv_kernel": [10, 4, 4], "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4, "feat_extract_norm": "layer", "do_stable_layer_norm": True,
        "num_buckets": 32, "max_bucket_distance": 100}
_LAYER = re.compile(r"\.layers\.(\d+)\.")  # encoder.layers.3. (not feature_extractor.conv_layers.3.)
_BOTTOM = ("feature_extractor", "feature_projection", "masked_spec_embed", "pos_conv_embed")


def is_hf(arch: str) -> bool:
    return arch in FAMILIES


def write_tiny_encoder(path: str | Path, arch: str = "wav2vec2", seed: int = 0) -> Path:
    """A folder holding a randomly initialised TINY encoder (config.json + weights), as save_pretrained writes a
    real one: what `task.module.pretrained=<folder>` loads offline in tests."""
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(seed)
    config = AutoConfig.for_model(FAMILIES[arch], **TINY)
    AutoModel.from_config(config).save_pretrained(str(path))
    return Path(path)


def _source(pretrained: str) -> tuple[str, bool]:
    """(where, local_only) for from_pretrained: a folder, the Hugging Face cache, or the hub when reachable."""
    path = Path(os.path.expanduser(pretrained))
    if path.exists() or pretrained.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise ZooError(f"task.module.pretrained: {path} is not a folder saved with save_pretrained (no "
                           "config.json); pass such a folder, a hub id, or a speech/ctc .ckpt")
        return str(path), True
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(pretrained, "config.json"), str):
            return pretrained, True
    except Exception:  # noqa: BLE001 - a malformed id is simply "not cached"
        pass
    from zoo.kit.hub import hub_online

    if not hub_online():
        raise ZooError(f"task.module.pretrained={pretrained}: not in the Hugging Face cache and the hub is "
                       "unreachable; save_pretrained it where there is network and pass the folder")
    return pretrained, False


def build(arch: str, vocab_size: int, pretrained: Any, encoder_config: dict | None,
          overrides: dict | None) -> tuple[nn.Module, dict, str]:
    """-> (HFCTC model, its encoder config as plain JSON values, where the weights came from).

    encoder_config given (load_from_checkpoint): that architecture, random init (the state dict follows).
    pretrained a hub id or folder: its weights, a fresh CTC head of vocab_size rows. Otherwise: random init of
    the family's default config (or TINY fields given in overrides)."""
    from transformers import AutoConfig, AutoModelForCTC

    head = {"vocab_size": vocab_size, "pad_token_id": 0, "ctc_loss_reduction": "mean", **(overrides or {})}
    if encoder_config is not None:
        config = AutoConfig.for_model(**{**encoder_config, **head})
        return HFCTC(AutoModelForCTC.from_config(config)), _plain(config), "checkpoint"
    if isinstance(pretrained, str) and pretrained and not os.path.isfile(os.path.expanduser(pretrained)):
        where, local = _source(pretrained)
        try:
            model = AutoModelForCTC.from_pretrained(where, local_files_only=local, ignore_mismatched_sizes=True,
                                                    **head)
        except (OSError, ValueError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise ZooError(f"task.module.pretrained={pretrained}: cannot load it ({first})") from None
        if model.config.model_type != FAMILIES[arch]:
            raise ZooError(f"task.module.pretrained={pretrained} is a {model.config.model_type} model; set "
                           f"task.module.arch={model.config.model_type}")
        return HFCTC(model), _plain(model.config), where
    config = AutoConfig.for_model(FAMILIES[arch], **head)
    return HFCTC(AutoModelForCTC.from_config(config)), _plain(config), "random init"


def checkpoint_encoder_config(path: str) -> dict | None:
    """The encoder config a speech/ctc checkpoint of an HF arch carries (None for a plain weights file)."""
    from zoo.core.checkpoint import load_checkpoint

    if not str(path).endswith(".ckpt"):
        return None
    try:
        ckpt = load_checkpoint(path)
    except ZooError as e:
        raise ZooError(f"task.module.pretrained: {e}") from None
    return (ckpt.get("hyper_parameters") or {}).get("encoder_config")


def _plain(config: Any) -> dict:
    """The config as plain JSON values (torch.load(weights_only=True) reads them back)."""
    return json.loads(config.to_json_string())


class HFCTC(nn.Module):
    """waveform (B, T) + lengths (B,) -> CTC logits (B, T', V) + output lengths (B,); `head` is the CTC layer."""

    takes_wave = True

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.hf = model
        # Models with group norm in the feature extractor (wav2vec2-base) were trained without an attention mask:
        # zero padding is what they expect (the transformers documentation on Wav2Vec2).
        self.use_mask = getattr(model.config, "feat_extract_norm", "layer") == "layer"

    @property
    def head(self) -> nn.Module:
        return self.hf.lm_head

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.arange(wave.shape[1], device=wave.device)[None, :] < lengths[:, None]
        n = lengths.clamp(min=1)[:, None].to(wave.dtype)
        mean = (wave * mask).sum(1, keepdim=True) / n
        var = (((wave - mean) * mask) ** 2).sum(1, keepdim=True) / n
        x = ((wave - mean) / (var + 1e-7).sqrt()) * mask
        logits = self.hf(input_values=x, attention_mask=mask.long() if self.use_mask else None).logits
        out = self.hf._get_feat_extract_output_lengths(lengths).clamp(min=1, max=logits.shape[1])
        return logits, out.to(torch.long)

    def freeze_feature_encoder(self) -> None:
        self.hf.freeze_feature_encoder()

    def num_layers(self) -> int:
        return int(self.hf.config.num_hidden_layers)


def layer_id(name: str, num_layers: int) -> int:
    """0 for the convolutional feature encoder and its projection, i + 1 for transformer layer i, num_layers + 1 for
    the rest (final norm, CTC head)."""
    if any(k in name for k in _BOTTOM):
        return 0
    m = _LAYER.search(name)
    return int(m.group(1)) + 1 if m else num_layers + 1


def param_groups(model: HFCTC, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """AdamW groups with layer-wise lr decay (as nlp does for BERT): the head gets the full rate, layer i
    `layer_decay ** (L - i)` of it, the feature encoder `layer_decay ** (L + 1)`; lower layers move less."""
    from zoo.kit.optim import no_decay_names
    from zoo.kit.optim import param_groups as zoo_groups

    if not 0.0 < layer_decay <= 1.0:
        raise ZooError(f"task.module.layer_decay must be in (0, 1], got {layer_decay}")
    skip = no_decay_names(model)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if layer_decay == 1.0:
        return zoo_groups(named, weight_decay, no_decay=skip)
    top = model.num_layers()
    by_layer: dict[int, list] = {}
    for n, p in named:
        by_layer.setdefault(layer_id(n, top), []).append((n, p))
    groups = []
    for lid in sorted(by_layer):
        groups += zoo_groups(by_layer[lid], weight_decay, lr_scale=layer_decay ** (top + 1 - lid), no_decay=skip)
    return groups
