"""Fine-tuning from a zoo speech checkpoint, also when the new data brings new characters.

The DataModule extends the checkpoint's vocabulary (old characters keep their indices, new ones are appended:
see Vocab.extend); here the old output rows are copied and the new rows keep their fresh initialisation.
"""

from __future__ import annotations

import logging

import torch

from zoo.checkpoint import load_checkpoint
from zoo.errors import ZooError

log = logging.getLogger(__name__)


def _is_head(name: str) -> bool:
    return name.startswith("model.head.")


def load_init_weights(module: torch.nn.Module, path: str) -> None:
    try:
        ckpt = load_checkpoint(path)  # one line for a missing, corrupt or foreign file
    except ZooError as e:
        raise ZooError(f"task.module.init_from: {e}") from None
    old_vocab = list(ckpt.get("hyper_parameters", {}).get("vocab") or [])
    new_vocab = module.vocab.tokens
    if not old_vocab or new_vocab[: len(old_vocab)] != old_vocab:
        raise ZooError(f"vocabulary of {path} is not a prefix of this run's; set task.data.base_vocab_from to the "
                       "same checkpoint as task.module.init_from")
    own = module.state_dict()
    state = {k: v for k, v in ckpt["state_dict"].items() if k in own}
    bad = [k for k, v in state.items() if not _is_head(k) and v.shape != own[k].shape]
    missing = [k for k in own if k not in state and not k.startswith("metrics.")]
    if bad or missing:
        raise ZooError(f"{path} does not match this architecture ({(bad or missing)[:3]}...); use the same "
                       f"task.module.arch/model/n_mels as the checkpoint ({ckpt['hyper_parameters'].get('arch')})")
    n_old = len(old_vocab)
    for k, v in state.items():
        if _is_head(k) and v.shape != own[k].shape:
            merged = own[k].clone()
            merged[:n_old] = v  # rows of the old characters; rows of the new ones stay freshly initialised
            state[k] = merged
    module.load_state_dict(state, strict=False)
    added = new_vocab[n_old:]
    log.info("initialised from %s; %d new output characters %s", path, len(added), added)
