#!/usr/bin/env bash
# A short GPU sanity window (the lent H200 has no network): the carried wheels, the preflight, then the device's
# facts (AMP, cuDNN, precision auto), a DDP launch of the main job and scripts/evidence/bench_vision_gpu.py, inside a
# deadline (GPU_BUDGET_S, default 300 s); writes $OUT/gpu_check.md and gpu_check.log.
#   scripts/gpu/gpu_bench.sh --prepare    here, once: the wheels into .whl/ (shared with gpu_bench.sh)
#   scripts/gpu/gpu_check.sh --dry-run    here: the wheels, Python 3.12 and the imports, as gpu_bench.sh --dry-run
#   scripts/gpu/gpu_check.sh              there, with carry [".whl"]
# NOT YET RUN ON A GPU: written and checked with --dry-run only.
case "${1:-}" in -h|--help) sed -n '2,/^case /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MODE=${1:-run}
if [ "$MODE" = --dry-run ]; then
  exec bash scripts/gpu/gpu_bench.sh --dry-run
fi
PY=${PYTHON:-python3}
START=$(date +%s)
BUDGET=${GPU_BUDGET_S:-300}
OUTDIR=${OUT:-$ROOT/bench_out}
REPORT=gpu_check
export ZOO_OUTPUT_ROOT=${ZOO_OUTPUT_ROOT:-/tmp/zoo_gpu_check} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
# shellcheck source=scripts/gpu/lib.sh
. "$ROOT/scripts/gpu/lib.sh"
: > "$MD"
install_wheels || exit 3
preflight || { close_report; exit 3; }
phase device 30 tail "$PY" - <<'PY'
import torch
from zoo.core.trainer import resolve_precision
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0), "bf16", torch.cuda.is_bf16_supported())
print("precision auto ->", resolve_precision("auto"))
PY
phase ddp_main_job 90 tail "$PY" -m zoo train trainer=ddp trainer.devices=1 trainer.max_epochs=1 \
  trainer.enable_progress_bar=false
phase bench_vision_gpu 150 tail "$PY" scripts/evidence/bench_vision_gpu.py
close_report
