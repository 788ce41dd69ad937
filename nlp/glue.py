"""GLUE tasks through Hugging Face `datasets` (needs the network, or the datasets cache from an earlier download).

Each task has its columns, label names and the metrics its leaderboard reports. GLUE's test splits have no labels,
so the validation split is used for validation and for `zoo test`.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.errors import ZooError

HUB_ID = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    text: str
    text_pair: str | None
    labels: tuple[str, ...]  # empty: regression
    metrics: tuple[str, ...]
    val_split: str = "validation"


TASKS: dict[str, GlueTask] = {
    "sst2": GlueTask("sentence", None, ("negative", "positive"), ("acc",)),
    "cola": GlueTask("sentence", None, ("unacceptable", "acceptable"), ("mcc", "acc")),
    "mrpc": GlueTask("sentence1", "sentence2", ("not_equivalent", "equivalent"), ("acc", "f1")),
    "qqp": GlueTask("question1", "question2", ("not_duplicate", "duplicate"), ("acc", "f1")),
    "qnli": GlueTask("question", "sentence", ("entailment", "not_entailment"), ("acc",)),
    "rte": GlueTask("sentence1", "sentence2", ("entailment", "not_entailment"), ("acc",)),
    "mnli": GlueTask("premise", "hypothesis", ("entailment", "neutral", "contradiction"), ("acc",),
                     "validation_matched"),
    "stsb": GlueTask("sentence1", "sentence2", (), ("pearson", "spearman")),
}


def spec(name: str) -> GlueTask:
    if name not in TASKS:
        raise ZooError(f"unknown GLUE task '{name}'; use task.data.dataset=glue/<name> with one of {sorted(TASKS)}")
    return TASKS[name]


def load(name: str) -> dict[str, list[dict]]:
    """{"train": rows, "val": rows} with rows {"text", "text_pair", "label"} (label: str name, or float for STS-B)."""
    task = spec(name)
    from zoo.kit.hub import hub_online

    online = hub_online()
    try:
        import datasets

        ds = datasets.load_dataset(HUB_ID, name)
    except Exception as e:  # noqa: BLE001 - offline, missing cache, hub errors: all the same fix for the user
        where = "the hub is reachable but loading failed" if online else "no network and no datasets cache"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise ZooError(f"cannot load GLUE '{name}' ({where}: {first}); run once with network to fill the "
                       "datasets cache, or export it to TSV and use task.data.dataset=files") from None
    out = {}
    for split, hf_split in (("train", "train"), ("val", task.val_split)):
        rows = []
        for ex in ds[hf_split]:
            label = ex["label"]
            label = float(label) if not task.labels else task.labels[int(label)]
            rows.append({"text": ex[task.text], "text_pair": ex[task.text_pair] if task.text_pair else None,
                         "label": label})
        out[split] = rows
    return out
