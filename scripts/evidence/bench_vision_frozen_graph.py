"""The frozen backbone's pooled features in eager mode against the optimised TorchScript graph (vision/frozen.py), as
the cached epochs of `experiment=vision_imagefolder` compute them (EfficientNet-Lite0, packaged ImageNet weights,
channels_last, no autograd), alternated pair by pair in one process.

    python scripts/evidence/bench_vision_frozen_graph.py                  # 7 pairs, batch 32 at 224 px, 2 threads
    python scripts/evidence/bench_vision_frozen_graph.py --pairs 9 --threads 1

Prints the seconds a batch took (median, min, max over the pairs), the median of the per-pair ratios, the largest
difference between the two outputs, the time to build the graph and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from common import load1, this_command, write_record  # puts the checkout first on sys.path

from zoo.vision import frozen
from zoo.vision.models import create_backbone


def timed(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        fn(x)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {os.cpu_count()} CPUs, {args.threads} torch threads, uptime: {os.popen('uptime').read().strip()}")
    model, source = create_backbone("efficientnet_lite0", 2, 3, "auto", 0.0)
    model = model.eval().to(memory_format=torch.channels_last)
    print(f"# {source}")
    x = torch.randn(args.batch, 3, args.size, args.size).contiguous(memory_format=torch.channels_last)

    def eager(images: torch.Tensor) -> torch.Tensor:
        return model.forward_head(model.forward_features(images), pre_logits=True)

    start = time.perf_counter()
    graph = frozen.pooled_graph(model, x)
    built = time.perf_counter() - start
    if graph is None:
        raise SystemExit("bench_vision_frozen_graph: the graph could not be built here")
    with torch.inference_mode():
        diff = (graph(x) - eager(x)).abs().max().item()
    timed(eager, x), timed(graph, x)  # first calls: allocations, the graph's profiling run
    times: dict[str, list[float]] = {"eager": [], "graph": []}
    for _ in range(args.pairs):
        times["eager"].append(timed(eager, x))
        times["graph"].append(timed(graph, x))
    for name, t in times.items():
        print(f"{name}: {statistics.median(t):.3f} s a batch of {args.batch} (min {min(t):.3f}, max {max(t):.3f})")
    ratios = [e / g for e, g in zip(times["eager"], times["graph"])]
    print(f"eager / graph per pair: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, "
          f"max {max(ratios):.2f}); largest output difference {diff:.1e}; graph built in {built:.1f} s")
    print(f"# uptime at the end: {os.popen('uptime').read().strip()}")
    if (args.batch, args.size) == (32, 224):  # the batch the vision results page quotes
        print("record:", write_record(
            "vision.frozen_graph_batch_s", round(statistics.median(times["graph"]), 2), unit="s",
            metric=f"seconds per batch of {args.batch} photos through the frozen backbone (frozen_jit), median",
            command=this_command(), load=f"{load1():.1f}",
            extra={"eager_s": round(statistics.median(times["eager"]), 2), "pairs": args.pairs,
                   "ratio_median": round(statistics.median(ratios), 2), "ratio_min": round(min(ratios), 2),
                   "ratio_max": round(max(ratios), 2)}))


if __name__ == "__main__":
    main()
