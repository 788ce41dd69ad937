"""`task.module.pretrained=` for nlp/bert: where the encoder's weights come from.

`task.module.encoder` names the architecture and the tokenizer; `pretrained` names the weights:
- true: the encoder's own weights (local folder, Hugging Face cache, the packaged MiniLM, or the hub);
  auto: the same, or random init with a warning when they are nowhere to be found; false: random init;
- a hub id or a folder saved with save_pretrained (a zoo run's `hf_model/`);
- a zoo .ckpt of nlp/bert, or a weights file (.bin, .safetensors, .pt).
The encoder always loads by name and shape; the classification head loads only when the source was trained on the
same labels, otherwise it starts fresh (another number of labels, other names). What loaded and what did not is
reported by name (console, cli.log, TensorBoard `model/pretrained`, the checkpoint's `pretrained_report`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError
from zoo.kit.pretrained import WEIGHT_SUFFIXES, announce_report, match_weights, read_pretrained

TASK = "nlp/bert"
OPTION = "task.module.pretrained"
SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
log = logging.getLogger(__name__)


def choice(value: Any) -> str:
    """'true' | 'false' | 'auto' | 'source' (a hub id, folder, checkpoint or weights file)."""
    text = str(value).strip().lower()
    if value is True or text == "true":
        return "true"
    if value in (None, False) or text in ("false", "none", "null", ""):
        return "false"
    return "auto" if text == "auto" else "source"


def head_prefixes(model: Any) -> tuple[str, ...]:
    """Everything outside the encoder (BERT's `classifier.`, DistilBERT's `pre_classifier.` too, ...)."""
    base = f"{model.base_model_prefix}."
    return tuple(sorted({n.split(".")[0] + "." for n in model.state_dict() if not n.startswith(base)}))


def _labels_of(config: Any) -> list[str] | None:
    arch = (getattr(config, "architectures", None) or [""])[0]
    if not arch.endswith("ForSequenceClassification"):
        return None
    return [config.id2label[i] for i in sorted(config.id2label)]


def _from_folder_or_hub(location: str, local: bool, where: str) -> tuple[dict, list[str] | None]:
    """The tensors of a save_pretrained folder or hub model; a base encoder's (absent) head is left out."""
    from transformers import AutoModelForSequenceClassification

    from zoo.nlp.models.hub import quiet_load

    try:
        with quiet_load(local):
            model, info = AutoModelForSequenceClassification.from_pretrained(
                location, local_files_only=local, output_loading_info=True)
    except (OSError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise ZooError(f"{OPTION}: cannot load {where} ({first}); give a folder saved with save_pretrained "
                       "(config.json + weights), a hub id, or an nlp/bert .ckpt") from None
    absent = set(info.get("missing_keys") or [])  # initialised by transformers, not read from the source
    return {k: v for k, v in model.state_dict().items() if k not in absent}, _labels_of(model.config)


def _from_file(path: str, config: Any) -> tuple[dict, list[str] | None]:
    weights, ckpt = read_pretrained(path, TASK)
    if any(k.startswith("model.") for k in weights):  # a LightningModule's state dict: the model's part
        weights = {k[len("model."):]: v for k, v in weights.items() if k.startswith("model.")}
    hp = (ckpt or {}).get("hyper_parameters") or {}
    theirs = hp.get("encoder_config") or {}
    differ = [k for k in SHAPE_KEYS if k in theirs and theirs[k] != getattr(config, k, None)]
    if differ:
        desc = ", ".join(f"{k}={theirs[k]}" for k in differ)
        raise ZooError(f"{OPTION}: {path} holds another encoder ({desc}) than task.module.encoder builds; set "
                       f"task.module.encoder={hp.get('encoder')} to fine-tune from it")
    labels = hp.get("label_names") if hp.get("task_type", "classification") == "classification" else ["<score>"]
    return weights, (list(labels) if labels else None)


def source_weights(value: str, config: Any) -> tuple[dict, list[str] | None, str]:
    """(tensors by name, the labels its head was trained on or None, where) of a non-boolean `pretrained`."""
    from zoo.nlp.models.hub import resolve

    path = Path(value).expanduser()
    if path.is_dir() or not (path.suffix in WEIGHT_SUFFIXES or value.startswith((".", "/", "~"))):
        source = resolve(value)  # a folder or hub id; one line when it is nowhere (offline)
        weights, labels = _from_folder_or_hub(source.location, source.local_only, value)
        return weights, labels, f"{value} ({source.kind})"
    weights, labels = _from_file(value, config)
    return weights, labels, value


def transfer(model: Any, value: str, config: Any) -> dict:
    """Load `value` into `model` (built from `config`); the report by name."""
    weights, labels, where = source_weights(value, config)
    ours = [config.id2label[i] for i in sorted(config.id2label)] if config.problem_type != "regression" else ["<score>"]
    base = model.base_model_prefix
    if not any(k.startswith(f"{base}.") for k in weights):  # a bare encoder's names: add the model's prefix
        weights = {f"{base}.{k}": v for k, v in weights.items()}
    fresh = () if labels is not None and labels == ours else head_prefixes(model)
    load, report = match_weights(model.state_dict(), weights, where, f"{config.model_type} encoder", fresh=fresh)
    with torch.no_grad():
        model.load_state_dict(load, strict=False)
    if fresh:
        report["notes"] = [f"labels {labels or '(none)'} -> {ours}: new classification head"]
    return report


def info_report(model: Any, info: dict, where: str) -> dict:
    """The report of a transformers from_pretrained load, in match_weights' shape."""
    heads = head_prefixes(model)
    missing = list(info.get("missing_keys") or [])
    shape = [f"{k} {tuple(a)}->{tuple(b)}" for k, a, b in info.get("mismatched_keys") or []]
    skipped = {s.split(" ")[0] for s in shape} | set(missing)
    return {"source": where, "loaded": sorted(n for n in model.state_dict() if n not in skipped),
            "reinit": sorted(n for n in missing if n.startswith(heads)),
            "skipped_shape": shape, "missing": [n for n in missing if not n.startswith(heads)],
            "unused": sorted(info.get("unexpected_keys") or [])}


def announce(report: dict) -> dict:
    report["line"] = announce_report(report, log)
    return report
