"""Two torchrun agents (2 nodes x 1 process) against one node x 2 processes, alternated, same run (docs/scale.md).

    python scripts/bench_nodes.py /tmp/nodes 3        # <work dir> <pairs>; one JSON line per run
"""
import json, os, re, socket, subprocess, sys, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
import torch
root = Path(sys.argv[1]); pairs = int(sys.argv[2])
common = ["trainer.max_epochs=2", "task.data.image_size=16", "task.module.arch=resnet10t", "test_after_fit=false",
          "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
env = dict(os.environ, ZOO_OUTPUT_ROOT=str(root / "outputs"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
def port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]
def one_node(i):
    cmd = [sys.executable, "-m", "zoo", "train", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", *common]
    return [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
def two_nodes(i):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port()}", f"--rdzv-id=bench{i}", "-m", "zoo", "train", "trainer=ddp",
           "trainer.num_nodes=2", "trainer.accelerator=cpu", "trainer.devices=1", *common]
    return [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
rows = []
for i in range(pairs):
    for name, fn in (("one node x 2", one_node), ("two nodes x 1", two_nodes)) if i % 2 == 0 else (("two nodes x 1", two_nodes), ("one node x 2", one_node)):
        t0 = time.perf_counter(); procs = fn(i); outs = [p.communicate()[0] for p in procs]; wall = time.perf_counter() - t0
        out = "".join(outs)
        run = re.search(r"run dir:\s+(\S+)", out).group(1); acc = float(re.search(r"val/acc\s+([\d.]+)", out).group(1))
        ck = torch.load(Path(run) / "checkpoints" / "last.ckpt", weights_only=True)
        rows.append(dict(pair=i, setup=name, wall=round(wall, 1), acc=acc, step=ck["global_step"], run=run,
                         load=os.getloadavg()[0], codes=[p.returncode for p in procs]))
        print(json.dumps(rows[-1]), flush=True)
json.dump(rows, open(root / "rows.json", "w"))
