"""Deployment benchmarks and the RL play loop.

    python scripts/evidence/bench_deploy.py play <rl export dir> [--episodes 10] [--seed 0]
        an exported PPO agent plays its gymnasium env in a plain ONNX Runtime loop (torch is never imported)
    python scripts/evidence/bench_deploy.py latency <run dir> [--repeats 5] [--seconds 2] [--threads 2]
        batch-1 latency and batch-32 throughput of PyTorch eager, TorchScript, ONNX Runtime fp32 and int8 (exports
        the checkpoint first into <run dir>/bench_export/), the variants alternated round by round, with the
        validation metric of each; prints a markdown table (median and min-max over the rounds) and `uptime`

Numbers in docs/deploy.md come from these commands.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, ZOO_MODULE, Spread


# ---------------------------------------------------------------------------------------------- play (no torch)
def play(folder: Path, episodes: int, seed: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import onnxruntime as ort

    meta = json.loads((folder / "model.json").read_text())
    env = gym.make(meta["env"]["id"], **meta["env"]["kwargs"])
    sess = ort.InferenceSession(str(folder / meta["file"]), providers=["CPUExecutionProvider"])
    dtype = np.uint8 if meta["env"]["observation_dtype"] == "uint8" else np.float32
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action = sess.run(["action"], {"obs": np.asarray(obs, dtype=dtype)[None]})[0][0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"env": meta["env"]["id"], "returns": returns, "mean": sum(returns) / len(returns),
            "torch_imported": "torch" in sys.modules}


# ---------------------------------------------------------------------------------------------- latency
def export_variants(run: Path, out: Path) -> dict[str, Path]:
    """fp32 ONNX, int8 ONNX and TorchScript exports of the run's best checkpoint (through the real CLI)."""
    folders = {"onnx": out / "onnx", "int8": out / "int8", "torchscript": out / "torchscript"}
    args = {"onnx": [], "int8": ["export.quantize=int8"], "torchscript": ["export.format=torchscript"]}
    for name, folder in folders.items():
        if not (folder / "model.json").is_file():
            subprocess.run([*ZOO_MODULE, "export", f"ckpt_path={run}", f"export.out={folder}", *args[name]],
                           check=True, cwd=ROOT)
    return folders


def timed(fn, seconds: float) -> float:
    """Median seconds per call over about `seconds` of calls (after 3 warm-up calls: TorchScript's profiling
    executor optimises the graph on its first runs)."""
    for _ in range(3):
        fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 3:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return Spread.of(times).median


def latency(run: Path, repeats: int, seconds: float, threads: int) -> None:
    import numpy as np
    import torch

    from zoo.core.build import load_module
    from zoo.core.resume import checkpoint_argument
    from zoo.kit.hooks import find_hooks
    from zoo.verbs.export import Runner, deploy_config, numpy_outputs

    torch.set_num_threads(threads)
    run = run.resolve()
    folders = export_variants(run, run / "bench_export")
    path = checkpoint_argument("export", [f"ckpt_path={run}"])
    cfg, _ = deploy_config("export", [f"ckpt_path={path}"], path)
    deploy = find_hooks(cfg.task).need("deploy", "export")  # the task's deploy hooks, as `zoo export` finds them
    module = load_module(cfg, str(path))
    graph = deploy.export_graph(module)
    batches = deploy.example_batches(module, cfg, 10_000)  # the whole validation split for the metric
    names = graph.inputs
    runners = {"eager": lambda a: numpy_outputs(graph.module(*[torch.from_numpy(x) for x in a]))}
    for name, folder in folders.items():
        meta = json.loads((folder / "model.json").read_text())
        runners[name] = Runner(folder / meta["file"], meta["format"], names, threads)
    # Batch 1 and batch 32 from the first validation examples (nlp: the same padded length for all variants).
    first = [t.cpu().numpy() for t in batches[0].inputs]
    b32 = [np.ascontiguousarray(np.concatenate([a] * (32 // len(a) + 1))[:32]) for a in first]
    b1 = [np.ascontiguousarray(a[:1]) for a in first]
    rows: dict[str, dict[str, list[float]]] = {k: {"b1": [], "b32": []} for k in runners}
    with torch.inference_mode():
        for _ in range(repeats):  # alternate the variants each round: load changes hit them all alike
            for name, fn in runners.items():
                rows[name]["b1"].append(1000 * timed(lambda: fn(b1), seconds))
                rows[name]["b32"].append(32 / timed(lambda: fn(b32), seconds))
        metrics = {}
        for name, fn in runners.items():
            outs = [fn([t.cpu().numpy() for t in b.inputs]) for b in batches]
            s = deploy.score(outs, [b.targets for b in batches]) if batches[0].targets is not None else None
            metrics[name] = f"{s[0]} {s[1]:.4f}" if s else "-"
    n = sum(len(b.inputs[0]) for b in batches)
    print(f"\n{cfg.task.name}: {path.name}, {threads} threads, {repeats} rounds x {seconds:g} s per variant, "
          f"metric on {n} validation examples")
    print("| variant | batch 1 latency ms (median, min-max) | batch 32 items/s (median, min-max) | val metric |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        ms, per_s = Spread.of(r["b1"]), Spread.of(r["b32"])
        print(f"| {name} | {ms.median:.2f} ({ms.min:.2f}-{ms.max:.2f}) | "
              f"{per_s.median:.0f} ({per_s.min:.0f}-{per_s.max:.0f}) | {metrics[name]} |")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("play")
    a.add_argument("folder", type=Path)
    a.add_argument("--episodes", type=int, default=10)
    a.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("latency")
    b.add_argument("run", type=Path)
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--seconds", type=float, default=2.0)
    b.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if args.cmd == "play":
        print(json.dumps(play(args.folder, args.episodes, args.seed)))
    else:
        latency(args.run, args.repeats, args.seconds, args.threads)


if __name__ == "__main__":
    main()
