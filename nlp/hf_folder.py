"""Hugging Face format output, and the tokenizer that travels inside every checkpoint.

`export_hf` writes config.json (with id2label/label2id), model.safetensors and the tokenizer files, loadable with
`AutoModelForSequenceClassification.from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)`.
`HFExport` does it at the end of fit with the best checkpoint's weights: `<run_dir>/hf_model/`, written into a temp
folder first and renamed into place, so a kill mid-write leaves the earlier folder (or none), never half of one.
From a checkpoint: `python -m zoo export ckpt_path=<ckpt|run dir> export.format=hf` (nlp/deploy.py's NATIVE).
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from zoo.core import owned
from zoo.core.checkpoint import load_checkpoint

log = logging.getLogger(__name__)


def tokenizer_to_files(tokenizer: Any) -> dict[str, str]:
    """The tokenizer's save_pretrained files as {name: text}; binary ones (sentencepiece) as "b64:<base64>".

    Plain strings keep `torch.load(weights_only=True)` working on the checkpoint.
    """
    with tempfile.TemporaryDirectory() as d:
        tokenizer.save_pretrained(d)
        out = {}
        for p in sorted(Path(d).rglob("*")):
            if p.is_file():
                raw = p.read_bytes()
                try:
                    out[str(p.relative_to(d))] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    out[str(p.relative_to(d))] = "b64:" + base64.b64encode(raw).decode()
        return out


def tokenizer_from_files(files: dict[str, str]) -> Any:
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            path = Path(d) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if text.startswith("b64:"):
                path.write_bytes(base64.b64decode(text[4:]))
            else:
                path.write_text(text, encoding="utf-8")
        return AutoTokenizer.from_pretrained(d, local_files_only=True)


def export_hf(module: Any, out_dir: str | Path, state_dict: dict | None = None) -> Path:
    """Save `module.model` (optionally with other weights, e.g. the best checkpoint's) and its tokenizer."""
    import copy

    out = Path(out_dir)
    model = module.model
    if state_dict is not None:
        model = copy.deepcopy(model).cpu()
        prefix = "model."
        model.load_state_dict({k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)})
    from zoo.nlp.models.hub import quiet_load

    with quiet_load():  # no "Writing model shards" bar for a file or two
        model.save_pretrained(out, safe_serialization=True)
    if module.tokenizer is not None:
        module.tokenizer.save_pretrained(out)
    return out


class HFExport(Callback):
    """At the end of fit, rank 0 writes the best checkpoint's weights in Hugging Face format to `<run_dir>/hf_model`."""

    def __init__(self, dirname: str = "hf_model") -> None:
        self.dirname = dirname

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.global_rank != 0:
            return
        state = None
        ckpt = trainer.checkpoint_callback
        best = getattr(ckpt, "best_model_path", "") if ckpt is not None else ""
        if best and Path(best).is_file():
            state = load_checkpoint(best)["state_dict"]
        run = Path(trainer.default_root_dir)
        tmp = owned.temp_dir(run, prefix=f".{self.dirname}.")
        try:
            export_hf(pl_module, tmp, state)
            out = place(tmp, run / self.dirname)
        finally:
            owned.remove(tmp)  # gone already unless the write failed
        log.info("saved the %s model in Hugging Face format to %s", "best" if state else "last", out)


def place(new: Path, out: Path) -> Path:
    """Put the finished folder `new` at `out`. An `out` already there is this run's own (a new run is refused a
    folder holding one; a resumed run wrote it before it stopped) and is replaced when it holds only the files an
    export writes; with anything else in it, it stays as it is and the new folder goes beside it."""
    try:
        owned.replace_listed(new, out, owned.listed_files(new))
        return out
    except FileExistsError:
        beside = owned.created(out.with_name(f"{out.name}-{new.name.rsplit('.', 2)[-2]}"))
        os.replace(new, beside)
        log.warning("%s holds files a Hugging Face export does not write; kept it, wrote the new one to %s", out,
                    beside)
        return beside

