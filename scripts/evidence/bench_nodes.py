"""Two torchrun agents (2 nodes x 1 process) against one node x 2 processes, alternated, same run (docs/scale.md).

    python scripts/evidence/bench_nodes.py /tmp/nodes 3        # <work dir> <pairs>; one JSON line per run
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from common import ZOO_MODULE, free_port, load1, zoo_env

SMALL_RUN = ["trainer.max_epochs=2", "task.data.image_size=16", "task.module.arch=resnet10t", "test_after_fit=false",
             "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]


def start(cmd: list[str], root: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def one_node(i: int, root: Path, env: dict[str, str]) -> list[subprocess.Popen]:
    """One zoo process; Lightning's DDP launcher starts its second rank."""
    cmd = [*ZOO_MODULE, "train", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", *SMALL_RUN]
    return [start(cmd, root, env)]


def two_nodes(i: int, root: Path, env: dict[str, str]) -> list[subprocess.Popen]:
    """Two torchrun agents meeting at a c10d rendezvous on this machine, one zoo process each."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id=bench{i}", "-m", "zoo", "train", "trainer=ddp",
           "trainer.num_nodes=2", "trainer.accelerator=cpu", "trainer.devices=1", *SMALL_RUN]
    return [start(cmd, root, env) for _ in range(2)]


def main() -> None:
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    root, pairs = Path(sys.argv[1]), int(sys.argv[2])
    env = zoo_env(ZOO_OUTPUT_ROOT=str(root / "outputs"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    setups = [("one node x 2", one_node), ("two nodes x 1", two_nodes)]
    rows = []
    for i in range(pairs):
        for name, fn in setups if i % 2 == 0 else setups[::-1]:  # alternated: a change of load hits both alike
            t0 = time.perf_counter()
            procs = fn(i, root, env)
            out = "".join(p.communicate()[0] for p in procs)
            wall = time.perf_counter() - t0
            run = re.search(r"run dir:\s+(\S+)", out).group(1)
            acc = float(re.search(r"val/acc\s+([\d.]+)", out).group(1))
            import torch  # here, not at the top: `--help` imports nothing heavy

            ck = torch.load(Path(run) / "checkpoints" / "last.ckpt", weights_only=True)
            rows.append(dict(pair=i, setup=name, wall=round(wall, 1), acc=acc, step=ck["global_step"], run=run,
                             load=load1(), codes=[p.returncode for p in procs]))
            print(json.dumps(rows[-1]), flush=True)
    (root / "rows.json").write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
