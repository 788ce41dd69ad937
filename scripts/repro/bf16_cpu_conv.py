"""Reproduce a torch CPU bug: bf16 autocast conv backward returns garbage weight gradients for a stride-2 3x3 conv
whose input map is 1x1 (timm resnet10t's layer4.0.conv1 on 16 px images).

    for i in $(seq 8); do OMP_NUM_THREADS=1 python scripts/repro/bf16_cpu_conv.py; done      # 16 px: several BAD
    for i in $(seq 8); do OMP_NUM_THREADS=1 python scripts/repro/bf16_cpu_conv.py 32; done   # 32 px: all ok

Each process trains 4 AdamW steps and compares the conv's weight gradient with the same gradient recomputed in fp32
from the conv's own bf16 input and output gradient. It only shows in some fresh processes (uninitialised memory):
replaying the captured tensors in the same process gives the right answer.
"""

from __future__ import annotations

import argparse


def main(size: int) -> None:
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model("resnet10t", num_classes=4)
    conv, seen = model.layer4[0].conv1, {}
    conv.register_forward_hook(lambda mod, args, out: seen.update(x=args[0].detach()))
    conv.register_full_backward_hook(lambda mod, gin, gout: seen.update(gout=gout[0].detach()))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 3, size, size, generator=g), torch.randint(0, 4, (32,), generator=g)
    for step in range(4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x[step * 8:(step + 1) * 8]), y[step * 8:(step + 1) * 8])
        opt.zero_grad()
        loss.backward()
        ref = torch.nn.grad.conv2d_weight(seen["x"].float(), conv.weight.shape, seen["gout"].float(), stride=2,
                                          padding=1)
        got = conv.weight.grad
        if not torch.allclose(got, ref, atol=1e-2, rtol=0.1):
            print(f"BAD step {step}: input {tuple(seen['x'].shape)}, |grad| max {got.abs().max():.3g}, "
                  f"fp32 reference {ref.abs().max():.3g} (torch {torch.__version__})")
            return
        opt.step()
    print(f"ok ({size} px, torch {torch.__version__})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", nargs="?", type=int, default=16, help="image size in pixels (16: the bug, 32: fine)")
    main(ap.parse_args().size)
