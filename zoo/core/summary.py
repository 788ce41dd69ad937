"""The model table printed when a fit starts: Lightning's, without its FLOPs column.

Lightning counts FLOPs in that table only for a module with an `example_input_array`, which no zoo task sets (each
task's batches have their own shape), so the column and its "Total FLOPs" line read 0 on every run. The zoo counts a
training step's FLOPs itself, on the first real batch (zoo.measure.throughput: `train/flops_per_sec`, `train/mfu` in
TensorBoard; `zoo bench` per combination); this table leaves the column out instead of showing a wrong zero.
"""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities.model_summary import get_human_readable_count

# Lightning's own logger for this table: its console handler is where Lightning's start-of-fit lines go
log = logging.getLogger("lightning.pytorch.callbacks.model_summary")

DROPPED = ("FLOPs",)


def format_table(columns: list[tuple[str, list[str]]]) -> str:
    """Columns (header, cells) side by side, a rule under the header and under the rows."""
    widths = [max([len(head), *(len(str(c)) for c in cells)]) for head, cells in columns]
    rows = [[head for head, _ in columns], *zip(*(cells for _, cells in columns))]
    lines = [" | ".join(f"{str(c):<{w}}" for c, w in zip(row, widths)).rstrip() for row in rows]
    rule = "-" * (sum(widths) + 3 * (len(widths) - 1))
    return "\n".join([lines[0], rule, *lines[1:], rule])


class ZooModelSummary(ModelSummary):
    """Lightning's ModelSummary callback (same layers, parameter counts and modes) without the FLOPs column."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        columns = [(head, cells) for head, cells in summary_data if head not in DROPPED]
        totals = [
            (get_human_readable_count(trainable_parameters), "Trainable params"),
            (get_human_readable_count(total_parameters - trainable_parameters), "Non-trainable params"),
            (get_human_readable_count(total_parameters), "Total params"),
            (f"{model_size:,.3f}", "Total estimated model params size (MB)"),
            (str(total_training_modes["train"]), "Modules in train mode"),
            (str(total_training_modes["eval"]), "Modules in eval mode"),
        ]
        footer = "\n".join(f"{value:<10} {what}" for value, what in totals)
        log.info("\n%s\n%s", format_table(columns), footer)
