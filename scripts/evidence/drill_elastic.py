"""Elastic drill (docs/scale.md): two torchrun agents with --max-restarts=1; kill -9 rank 1 `delay` s after the first
step checkpoint; lost steps = the last step rank 0 logged before the kill minus the step the restart continued from.

    python scripts/evidence/drill_elastic.py /tmp/drill 3 5     # <work dir> <delay s> <checkpoint_every_n_steps>
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import free_port, zoo_env

STEPS = 40


def main() -> None:
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    root, delay, every = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = zoo_env(ZOO_OUTPUT_ROOT=str(root / "outputs"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
                  TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=drill", "--max-restarts=1",
           "-m", "zoo", "train", "trainer=ddp", "trainer.num_nodes=2", "trainer.accelerator=cpu", "trainer.devices=1",
           "task.data.image_size=16", "task.module.arch=resnet10t", "trainer.enable_progress_bar=false",
           f"trainer.max_steps={STEPS}", "trainer.max_epochs=-1", "trainer.limit_train_batches=10",
           "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", "trainer.log_every_n_steps=1",
           f"checkpoint_every_n_steps={every}", "test_after_fit=false"]
    t0 = time.time()
    agents = [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    run = root / "outputs" / "vision" / "resnet" / "torchrun-drill"
    while not (run / "checkpoints" / "last.ckpt").is_file():
        time.sleep(0.05)
    time.sleep(delay)
    # The second agent's worker process: the child of one of the agent's threads.
    kids = [int(c) for t in Path(f"/proc/{agents[1].pid}/task").iterdir() for c in (t / "children").read_text().split()]
    os.kill(kids[0], signal.SIGKILL)
    t_kill = time.time()
    outs = [a.communicate(timeout=600)[0] for a in agents]
    wall = time.time() - t0
    resumed = sorted({int(m) for m in re.findall(r"continuing from .*?step (\d+)\)", "".join(outs))})
    import torch  # here, not at the top: `--help` imports nothing heavy
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted((run / "tensorboard").rglob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    first = EventAccumulator(str(events[0]))
    first.Reload()
    # train/loss_step is logged after each optimizer step, at the step's 0-based index: steps done = index + 1.
    reached = max(e.step for e in first.Scalars("train/loss_step"))
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    print(dict(codes=[a.returncode for a in agents], every=every, delay=delay, reached_step=reached + 1,
               resumed_from=resumed, lost=[reached + 1 - r for r in resumed], final_step=final, asked=STEPS,
               wall=round(wall, 1), restart_wall=round(time.time() - t_kill, 1)))


if __name__ == "__main__":
    main()
