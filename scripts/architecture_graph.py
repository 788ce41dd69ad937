"""Draw zoo's layers and the imports between them, from the real import graph: docs/architecture_layers.png.

    python scripts/architecture_graph.py [--out docs/architecture_layers.png]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

LAYERS = [  # top to bottom, as pyproject.toml's import-linter contract states them
    ("cli", ["zoo.cli"]),
    ("verbs", ["zoo.verbs"]),
    ("kit", ["zoo.kit"]),
    ("core", ["zoo.core"]),
    ("measure", ["zoo.measure"]),
    ("base", ["zoo.base", "zoo.imports"]),
    ("errors", ["zoo.errors"]),
]
DOMAINS = ["vision", "nlp", "rl", "speech", "gan"]


def layer_of(module: str) -> str | None:
    for name, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    parts = module.split(".")
    return "domains" if parts[0] == "zoo" and len(parts) > 1 and parts[1] in DOMAINS else None


def edges() -> tuple[Counter, dict[str, list[str]]]:
    import grimp

    graph = grimp.build_graph("zoo", cache_dir=None)
    counts: Counter = Counter()
    members: dict[str, set[str]] = {}
    for m in graph.modules:
        a = layer_of(m)
        if a is None:
            continue
        members.setdefault(a, set()).add(m)
        for n in graph.find_modules_directly_imported_by(m):
            b = layer_of(n)
            if b is not None and b != a:
                counts[(a, b)] += 1
    return counts, {k: sorted(v) for k, v in members.items()}


def layer_rank(name: str) -> int:
    """Top is 0; the domains sit above the kit (they may import it and everything under it)."""
    order = [n for n, _ in LAYERS]
    return order.index("kit") - 1 if name == "domains" else order.index(name)


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts, members = edges()
    names = [n for n, _ in LAYERS]
    y = {n: len(names) - i for i, n in enumerate(names)}
    y["domains"] = y["kit"]
    x = {n: 0.0 for n in names}
    x["domains"] = 3.2
    fig, ax = plt.subplots(figsize=(9, 7))
    for n in [*names, "domains"]:
        files = [m.split(".")[-1] for m in members.get(n, []) if not m.endswith("__init__")]
        label = n if n != "domains" else "vision nlp rl speech gan"
        face = "#e8f0fe" if n != "domains" else "#fde8e8"
        ax.add_patch(plt.Rectangle((x[n] - 1.3, y[n] - 0.32), 2.6, 0.64, fc=face, ec="#333"))
        ax.text(x[n], y[n] + 0.1, label, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x[n], y[n] - 0.15, f"{len(files)} modules", ha="center", va="center", fontsize=8, color="#555")
    for (a, b), k in sorted(counts.items()):
        if x[a] == x[b]:  # layer to a lower layer: bottom edge to top edge, fanned out by distance
            start, end = (x[a] + 0.25 * (y[a] - y[b] - 1), y[a] - 0.32), (x[b] + 0.25 * (y[a] - y[b] - 1), y[b] + 0.32)
        else:  # domains to a layer: left edge to right edge
            start, end = (x[a] - 1.3, y[a]), (x[b] + 1.3, y[b])
        wrong_way = layer_rank(a) > layer_rank(b)
        ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "lw": 0.8 + 0.1 * min(k, 30),
                                                         "color": "#c00" if wrong_way else "#357"})
        ax.text((start[0] + end[0]) / 2 + 0.05, (start[1] + end[1]) / 2, str(k), fontsize=7, color="#357")
    ax.set_xlim(-1.8, 4.8)
    ax.set_ylim(0.3, len(names) + 0.8)
    ax.axis("off")
    ax.set_title("zoo: layers (top imports bottom) and domains; arrow width ~ imports", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    for (a, b), k in sorted(counts.items()):
        print(f"  {a:>8} -> {b:<8} {k}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "architecture_layers.png"))
    draw(Path(ap.parse_args().out))
