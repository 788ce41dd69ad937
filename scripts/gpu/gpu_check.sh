#!/usr/bin/env bash
# One short GPU session (the lent H200 has no network): install the wheels carried in .whl/ (hydra-core, omegaconf,
# antlr4, gymnasium, cloudpickle, farama-notifications, soundfile; fetched here with
#   pip download --only-binary=:all: --python-version 3.12 --no-deps -d .whl hydra-core omegaconf \
#       antlr4-python3-runtime==4.9.3 gymnasium cloudpickle farama-notifications soundfile
# ), then check AMP, cudnn, a DDP launch and throughput.
#   scripts/gpu/gpu_check.sh     (from anywhere; it works in the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
pip install -q --no-index --no-deps --target .site .whl/*.whl
export PYTHONPATH="$PWD/.site:$PWD" HF_HUB_OFFLINE=1
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0), "bf16", torch.cuda.is_bf16_supported())
from zoo.core.trainer import resolve_precision
print("precision auto ->", resolve_precision("auto"))
PY
python -m zoo train trainer=ddp trainer.devices=1 trainer.max_epochs=1 trainer.enable_progress_bar=false
python scripts/evidence/bench_vision_gpu.py
