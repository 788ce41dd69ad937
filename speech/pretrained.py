"""`task.module.pretrained=` for speech/ctc: start from a zoo speech checkpoint (any vocabulary) or a weights file.

The acoustic model (front end, recurrent/conformer layers) loads by name and shape. The output layer is matched by
character: every character of this run's vocabulary that the source knows keeps its output row (wherever its index
now is), characters the source lacks start fresh, and both are named in the report. A plain weights file has no
vocabulary: its output layer loads only if the sizes agree, else it starts fresh. A different architecture
(arch/model/n_mels) is refused with one line.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from zoo.errors import ZooError
from zoo.kit.pretrained import announce_report, match_weights, read_pretrained, weights_path

TASK = "speech/ctc"
log = logging.getLogger(__name__)


def _is_head(name: str) -> bool:
    return name.startswith(("head.", "hf.lm_head."))  # the zoo's models, HF encoders (speech/models/hf.py)


def _check_hparams(module: Any, hp: dict, path: str, option: str) -> list[str]:
    """Refuse another architecture by name (other model sizes: by the tensors' shapes); notes for what differs."""
    own = module.hparams
    for key in ("arch", "n_mels"):
        if key in hp and hp[key] != own[key]:
            if hp.get("arch") == "whisper":  # the default task's checkpoint, in a log-Mel preset
                rnn_head = (hp.get("model") or {}).get("rnn_head")
                how = f"fine-tune it with experiment=speech_whisper_finetune {option}={path}"
                if rnn_head:
                    how += f" 'task.module.model={{rnn_head: {rnn_head}}}'"
            else:
                how = f"set task.module.{key}={hp[key]} (and the same task.module.model) to fine-tune from it"
            raise ZooError(f"{option}: {path} holds a {key}={hp[key]} model, this run builds {key}={own[key]}; {how}")
    if "sample_rate" in hp and hp["sample_rate"] != own["sample_rate"]:
        log.warning("%s: %s was trained at %d Hz, this run reads %d Hz audio (its features differ a little)", option,
                    path, hp["sample_rate"], own["sample_rate"])
        return [f"trained at {hp['sample_rate']} Hz, now {own['sample_rate']} Hz"]
    return []


def _map_rows(own: dict, src: dict, old_vocab: list[str], new_vocab: list[str]) -> None:
    """Output rows by character: a head tensor of the source is rebuilt in this run's vocabulary order (in place)."""
    old_index = {c: i for i, c in enumerate(old_vocab)}
    for name in [n for n in own if _is_head(n) and n in src]:
        value, target = src[name], own[name]
        if value.shape[0] != len(old_vocab) or value.shape[1:] != target.shape[1:]:
            continue  # not vocabulary-sized: left to the shape check
        merged = target.clone()  # rows of characters the source lacks keep this run's fresh initialisation
        for i, c in enumerate(new_vocab):
            if c in old_index:
                merged[i] = value[old_index[c]]
        src[name] = merged


def load_pretrained(module: Any, value: Any, option: str = "task.module.pretrained") -> dict | None:
    """Load `value` into module.model; the report by name (also what the checkpoint records), or None."""
    if module.hparams.get("arch") == "whisper" and option == "task.module.pretrained":
        from .whisper_weights import load

        report = load(module, value)  # packaged tiny.en, model.bin, transformers weights; None for a .ckpt
        if report is not None or not str(value).endswith(".ckpt"):
            return report
    path = weights_path(value, TASK, option, "checkpoints/best-....ckpt")
    if path is None:
        return None
    weights, ckpt = read_pretrained(path, TASK, option)
    if any(k.startswith("model.") for k in weights):  # a module's state dict: the acoustic model's part
        weights = {k[len("model."):]: v for k, v in weights.items() if k.startswith("model.")}
    hp = (ckpt or {}).get("hyper_parameters") or {}
    notes = _check_hparams(module, hp, path, option) if ckpt is not None else []
    own = module.model.state_dict()
    old_vocab, new_vocab = list(hp.get("vocab") or []), module.vocab.tokens
    added: list[str] = []
    if old_vocab:
        _map_rows(own, weights, old_vocab, new_vocab)
        added = [c for c in new_vocab if c not in set(old_vocab)]
        kept = len(new_vocab) - len(added)
        notes.append(f"output rows matched by character: {kept} of {len(new_vocab)} kept, new {added}")
    load, report = match_weights(own, weights, path, f"{module.hparams.arch} model", option=option)
    with torch.no_grad():
        module.model.load_state_dict(load, strict=False)
    report["reinit_rows"] = [f"{n}[{c!r}]" for c in added for n in own if _is_head(n) and n in load]
    report["new_characters"] = added
    report["notes"] = notes
    report["line"] = announce_report(report, log)
    return report


def load_init_weights(module: Any, path: str) -> dict | None:
    """The deprecated `task.module.init_from` (same loader; errors name the option the user set)."""
    return load_pretrained(module, path, option="task.module.init_from")
