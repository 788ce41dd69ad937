"""Export and serving hooks for nlp/bert (found by zoo/kit/hooks.py; called by `zoo export` and `zoo serve`).

Exported graph: input_ids, attention_mask (and token_type_ids when the tokenizer makes them), all (B, T) int64 with
dynamic batch and sequence length -> logits (B, num_labels) (scores (B,) for regression). The tokenizer's files are
written beside the model under tokenizer/ (AutoTokenizer.from_pretrained or the `tokenizers` library read them).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import Budget, Examples, Graph, compare, pad_concat

FORMATS = ("onnx", "torchscript", "exported_program")
# `zoo export export.format=hf`: the Hugging Face folder (from_pretrained-loadable), written by the task itself
NATIVE = {"hf": lambda module, out: _save_hf(module, out)}
# The TorchScript-based exporter bakes the traced attention-mask shape into the graph (logits off by ~2e-2 on other
# lengths, measured); the dynamo exporter keeps it symbolic (4e-9).
EXPORTER = "dynamo"
TOLERANCE = 1e-3
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CHUNK = 256  # texts tokenised at once by the server


class _Classifier(torch.nn.Module):
    """The Hugging Face model alone (exporters trace it; the LightningModule around it is training machinery) with
    the inputs as named positional arguments -> logits (B, L), or scores (B,) for regression."""

    def __init__(self, module: Any, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = module.model, names
        self.regression = module.hparams.task_type == "regression"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **kw).logits.float()
        return logits.squeeze(-1) if self.regression else logits


def input_names(module: Any) -> list[str]:
    made = getattr(module.tokenizer, "model_input_names", INPUTS[:2])
    return [n for n in INPUTS if n in made or n != "token_type_ids"]


def export_graph(module: Any) -> Graph:
    names = input_names(module)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
    dynamic["logits"] = {0: "batch"}
    return Graph(_Classifier(module, names), names, ["logits"], dynamic)


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    """Up to n validation texts, tokenised and padded per batch exactly as evaluation does."""
    from zoo.core.build import build_checked_data

    data = build_checked_data(cfg, module)
    data.tokenizer = module.tokenizer
    data.prepare_data()
    data.setup("validate")
    names, out, seen = input_names(module), [], 0
    for batch in data.val_dataloader():
        k = min(len(batch["input_ids"]), n - seen)
        out.append(Examples(tuple(batch[name][:k] if name in batch else torch.zeros_like(batch["input_ids"][:k])
                                  for name in names), batch["labels"][:k] if "labels" in batch else None))
        seen += k
        if seen >= n:
            break
    return out


def metadata(module: Any, cfg: Any) -> dict:
    hp, tok = module.hparams, module.tokenizer
    data = cfg.task.get("data") or {}
    return {
        "preprocess": {"tokenizer": "tokenizer/", "max_length": int(data.get("max_length", 128)),
                       "pad_token_id": int(tok.pad_token_id or 0), "padding": "right, to the longest in the batch",
                       "text_pair": "a sentence pair is tokenizer(text, text_pair)"},
        "task_type": hp.task_type,
        "postprocess": {"logits": "softmax over label_names" if hp.task_type == "classification"
                        else "the regression score itself"},
        "label_names": list(hp.label_names or []),
    }


def extra_files(module: Any) -> dict[str, bytes]:
    from zoo.nlp.hf_folder import tokenizer_to_files

    files = tokenizer_to_files(module.tokenizer)
    return {f"tokenizer/{k}": base64.b64decode(v[4:]) if v.startswith("b64:") else v.encode("utf-8")
            for k, v in files.items()}


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    if ref[0].ndim == 1:  # regression: agreement = share of scores within the tolerance
        return compare(ref, out, TOLERANCE, float(np.mean(np.abs(ref[0] - out[0]) <= TOLERANCE)))
    return compare(ref, out, TOLERANCE, float(np.mean(ref[0].argmax(-1) == out[0].argmax(-1))))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> tuple[str, float] | None:
    y = np.concatenate([np.asarray(t) for t in targets])
    out = np.concatenate([o[0] for o in outputs])
    if out.ndim == 1:
        return "pearson", float(np.corrcoef(out, y)[0, 1])
    return "acc", float(np.mean(out.argmax(-1) == y))


# ---------------------------------------------------------------------------------------------- serving
class Handler:
    """POST /predict with JSON {"texts": [...]} (or {"text": "..."}; pairs: "text_pairs") -> label and probs."""

    content_types = ("application/json",)

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        if module is not None:
            self.tokenizer = module.tokenizer
        else:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"), local_files_only=True)
        self.names = [i["name"] for i in meta["inputs"]]
        self.max_length = int(meta["preprocess"]["max_length"])
        pad = int(meta["preprocess"]["pad_token_id"])
        self.pad = {"input_ids": pad, "attention_mask": 0, "token_type_ids": 0}
        self.labels, self.task_type = meta["label_names"], meta["task_type"]

    def decode(self, body: bytes, content_type: str, budget: Budget | None = None) -> dict[str, np.ndarray]:
        from zoo.kit.deploy import BadRequest, json_body

        budget = budget or Budget()
        req = json_body(body)
        texts = req.get("texts", [req["text"]] if "text" in req else None)
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise BadRequest(422, 'send {"texts": ["a sentence", ...]} (non-empty strings) or {"text": "..."}')
        budget.items(len(texts), "texts")  # before the tokenizer sees them
        pairs = req.get("text_pairs")
        if pairs is not None and (not isinstance(pairs, list) or len(pairs) != len(texts)
                                  or not all(isinstance(t, str) for t in pairs)):
            raise BadRequest(422, '"text_pairs" must be a list with one string per text')
        parts = []
        for i in range(0, len(texts), CHUNK):  # the tokenizer's per-text objects live for one chunk at a time
            part = self.tokenize(texts[i:i + CHUNK], None if pairs is None else pairs[i:i + CHUNK])
            budget.take("tokens", int(part["attention_mask"].sum()),
                        f"tokens (after truncation to {self.max_length} per text)")
            parts.append(part)
        return {n: pad_concat([p[n] for p in parts], self.pad[n]) for n in self.names}

    def tokenize(self, texts: list[str], pairs: list[str] | None) -> dict[str, np.ndarray]:
        enc = self.tokenizer([self.head(t) for t in texts], None if pairs is None else [self.head(t) for t in pairs],
                             truncation=True, max_length=self.max_length, padding=True, return_tensors="np")
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        out = {n: np.asarray(enc[n], dtype=np.int64) if n in enc else np.zeros_like(ids) for n in INPUTS}
        if "attention_mask" not in enc:
            out["attention_mask"] = np.ones_like(ids)
        return out

    def head(self, text: str) -> str:
        """The start of `text` that holds all of its first max_length tokens: the tokenizer tokenises a whole text
        before truncating it (a 10 MB text took 730 MB), so a long one is cut at a window that doubles until it
        holds more tokens than are kept (one more for a word the cut splits)."""
        window = 16 * self.max_length
        while window < len(text):
            if len(self.tokenizer(text[:window], add_special_tokens=False)["input_ids"]) > self.max_length + 1:
                return text[:window]
            window *= 2
        return text

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        out = outputs[0]
        if self.task_type == "regression":
            return {"scores": [round(float(s), 4) for s in out]}
        rows = []
        for logits in out.astype(np.float64):
            p = np.exp(logits - logits.max())
            p /= p.sum()
            rows.append({"label": self.labels[int(p.argmax())],
                         "probs": {n: round(float(q), 4) for n, q in zip(self.labels, p)}})
        return {"predictions": rows}


def _save_hf(module: Any, out: Any) -> Any:
    from zoo.nlp.hf_folder import export_hf

    return export_hf(module, out)
