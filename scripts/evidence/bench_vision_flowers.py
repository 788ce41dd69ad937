"""Benchmark vision/resnet on real photos (../shared/data/images/flowers12): what ImageNet pretraining buys.

    python scripts/evidence/bench_vision_flowers.py                    # the four runs below, in order
    python scripts/evidence/bench_vision_flowers.py --runs probe full  # some of them
    python scripts/evidence/bench_vision_flowers.py --normalisation    # the input normalisation that fits the
                                                                       # packaged weights

Runs, each a real `python -m zoo train experiment=vision_flowers12 ...` in a subprocess, timed start to end
(interpreter start, data scan, weights, training, validation), with the machine's load average before and after:
  probe    packaged EfficientNet-Lite0 ImageNet weights, linear probe (the preset as it is)
  gradual  the same weights, head first, then the whole network at a 10x lower backbone rate
  full     the same weights, everything trained from the first step
  scratch  ResNet-18 from random init, same data, same wall-clock budget as `full` (trainer.max_time)
The table it prints is what docs/vision.md quotes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import SHARED, ZOO_MODULE, csv_series, run, shown, this_command, write_record, zoo_env

FLOWERS = SHARED / "images" / "flowers12"

RUNS = {
    "probe": ("EfficientNet-Lite0, packaged ImageNet weights, linear probe", []),
    "gradual": ("EfficientNet-Lite0, packaged weights, gradual unfreezing",
                ["task.module.finetune=gradual", "task.module.cache_features=false", "task.module.unfreeze_epoch=1",
                 "task.module.backbone_lr_scale=0.1", "trainer.max_epochs=2"]),
    "full": ("EfficientNet-Lite0, packaged weights, full fine-tuning",
             ["task.module.finetune=full", "task.module.cache_features=false", "task.module.optimizer.lr=1e-3",
              "task.module.weight_decay=0.05", "trainer.max_epochs=2"]),
    "scratch": ("ResNet-18, random init, full training",
                ["task.module.arch=resnet18", "task.module.pretrained=false", "task.module.finetune=full",
                 "task.module.cache_features=false", "task.module.optimizer.lr=3e-3", "task.module.weight_decay=0.05",
                 "trainer.max_epochs=50"]),
}


def run_one(name: str, timeout: int, threads: int, extra: list[str], budget_s: float | None) -> dict:
    what, overrides = RUNS[name]
    if name == "scratch" and budget_s:
        overrides = [*overrides, f"trainer.max_time=00:00:{int(budget_s) // 60:02d}:{int(budget_s) % 60:02d}"]
    out_root = Path(tempfile.mkdtemp(prefix=f"bench_flowers_{name}_"))
    cmd = [*ZOO_MODULE, "train", "experiment=vision_flowers12", *overrides, "logger=csv",
           "test_after_fit=false", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
           "trainer.num_sanity_val_steps=0", *extra]
    env = zoo_env(ZOO_OUTPUT_ROOT=str(out_root), ZOO_SHARED_DATA=str(SHARED), HF_HUB_OFFLINE="1",
                  OMP_NUM_THREADS=str(threads))
    print(f"$ HF_HUB_OFFLINE=1 OMP_NUM_THREADS={threads} {shown(cmd)}", flush=True)
    done = run(cmd, env=env, timeout=timeout)
    result = {"name": name, "what": what, "status": done.status, "wall": done.wall, "cmd": shown(cmd),
              "load": f"{done.load_before:.1f}->{done.load_after:.1f}", "val_acc": [], "source": ""}
    result["source"] = next((line.removeprefix("zoo: ") for line in done.output.splitlines()
                             if line.startswith("zoo: weights from")), "random init" if name == "scratch" else "")
    files = sorted(out_root.rglob("metrics.csv"))
    if files:
        result["val_acc"] = csv_series(files[0]).get("val/acc", [])
    if not done.ok:
        result["tail"] = done.tail()
    return result


def row(r: dict) -> str:
    accs = ", ".join(f"{a:.3f}" for a in r["val_acc"][:8]) + (" ..." if len(r["val_acc"]) > 8 else "")
    final = f"{r['val_acc'][-1]:.3f}" if r["val_acc"] else "-"
    return (f"| {r['what']} | {final} | {accs or '-'} | {len(r['val_acc'])} | {r['wall']:.0f} s | {r['load']} | "
            f"{r['status']} |")


def normalisation() -> None:
    """Top-1 on the 20 val photos of the one flowers12 species ImageNet has (daisy), the sklearn photos' top-5, and
    how far the inputs reaching each BatchNorm sit from its stored statistics, for both candidate normalisations."""
    import timm
    import torch
    from PIL import Image
    from sklearn.datasets import load_sample_images
    from timm.data import ImageNetInfo

    from zoo.vision.data import eval_transform
    from zoo.vision.models.packaged import load_packaged, to_timm

    info, daisy = ImageNetInfo(), 985
    sd, path = load_packaged("efficientnet_lite0")
    model = timm.create_model("efficientnet_lite0")
    model.load_state_dict(to_timm(sd, "efficientnet_lite0", path.name))
    model.eval()
    photos = [Image.fromarray(a) for a in load_sample_images().images]
    daisies = [Image.open(p).convert("RGB") for p in sorted((FLOWERS / "val" / "daisy").glob("*.jpg"))]
    flowers = [Image.open(p).convert("RGB") for p in sorted((FLOWERS / "val").rglob("*.jpg"))[::2]]
    print("| normalisation | china.jpg top-5 | flower.jpg top-5 | flowers12 val daisies top-1 'daisy' "
          "| BatchNorm input gap (first / all layers) |\n|---|---|---|---:|---:|")
    for label, mean, std in (("ImageNet mean/std", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                             ("0.5 / 0.5", (0.5,) * 3, (0.5,) * 3)):
        t = eval_transform(224, list(mean), list(std))
        gaps: list[float] = []

        def gap(mod, inp, out) -> None:  # noqa: ANN001 - a forward hook
            mu = inp[0].mean((0, 2, 3))
            gaps.append((((mu - mod.running_mean) ** 2) / (mod.running_var + mod.eps)).mean().item())

        with torch.no_grad():
            top = model(torch.stack([t(p) for p in photos])).softmax(-1).topk(5)
            hit = (model(torch.stack([t(p) for p in daisies])).argmax(-1) == daisy).float().mean().item()
            hooks = [m.register_forward_hook(gap) for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
            model(torch.stack([t(p) for p in flowers]))
            for h in hooks:
                h.remove()
        names = [", ".join(f"{info.index_to_description(i).split(',')[0]} {v:.2f}" for v, i in
                           zip(vs.tolist(), ix.tolist())) for vs, ix in zip(top.values, top.indices)]
        print(f"| {label} | {names[0]} | {names[1]} | {hit:.2f} | {gaps[0]:.3f} / {sum(gaps) / len(gaps):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per run before it is killed")
    ap.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads per run")
    ap.add_argument("--budget", type=float, default=None,
                    help="wall-clock seconds for `scratch` (default: the `full` run's, when it ran)")
    ap.add_argument("--normalisation", action="store_true", help="only compare the two candidate normalisations")
    ap.add_argument("extra", nargs="*", help="more zoo overrides for every run")
    args = ap.parse_args()
    if not (FLOWERS / "train").is_dir():
        raise SystemExit(f"bench_vision_flowers: {FLOWERS} not found (set ZOO_SHARED_DATA to the folder holding "
                         "images/flowers12)")
    if args.normalisation:
        return normalisation()
    print(f"# {os.cpu_count()} CPUs, uptime: {os.popen('uptime').read().strip()}", flush=True)
    results, budget = [], args.budget
    for name in args.runs:
        results.append(run_one(name, args.timeout, args.threads, args.extra, budget))
        if name == "full" and budget is None:
            budget = results[-1]["wall"]
        print(row(results[-1]), flush=True)
        if "tail" in results[-1]:
            print(results[-1]["tail"], flush=True)
    print("\n| run | final val acc | val acc per epoch | epochs | start to end | load avg before->after | status |")
    print("|---|---:|---|---:|---:|---|---|")
    for r in results:
        print(row(r))
    for r in results:
        print(f"# {r['name']}: {r['cmd']}\n#   {r['source']}")
    if not args.extra:  # the preset as it is, and random init in the budget: the vision pages render these
        for r in results:
            if r["name"] in ("probe", "scratch") and r["val_acc"] and r["status"] == "ok":
                print("record:", write_record(
                    f"vision.flowers12_{r['name']}_acc", round(r["val_acc"][-1], 3), metric="val/acc, final epoch",
                    command=this_command(), preset="vision_flowers12", load=r["load"],
                    extra={"wall_s": round(r["wall"]), "epochs": len(r["val_acc"]), "run": r["cmd"]}))


if __name__ == "__main__":
    main()
