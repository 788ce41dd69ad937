"""zoo.env: what a run records about its environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from zoo.measure import env


def test_collect_is_json_and_names_the_real_environment() -> None:
    e = env.collect()
    assert json.loads(json.dumps(e)) == e  # plain containers only: env.json and weights_only checkpoints need it
    import lightning
    import torch

    assert e["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert e["packages"]["lightning"] == lightning.__version__
    assert e["cpu"]["cores"] >= 1 and e["cpu"]["model"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=env.ROOT, capture_output=True, text=True).stdout.strip()
    assert e["git"]["commit"] == (head or "unknown")
    assert e["gpu"]["cuda"] == torch.version.cuda
    if not torch.cuda.is_available():
        assert e["gpu"]["names"] == [] and e["gpu"]["cudnn"] is None


def test_missing_package_is_none() -> None:
    assert env.package_versions(("numpy", "surely-not-a-package-zoo")) == {
        "numpy": env.metadata.version("numpy"), "surely-not-a-package-zoo": None}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"})


def test_git_state_commit_and_dirty(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-qm", "first")
    clean = env.git_state(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / "untracked.txt").write_text("scratch")  # untracked files do not change what the code does
    assert env.git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert env.git_state(tmp_path) == {"commit": clean["commit"], "dirty": True}


def test_git_state_outside_a_checkout_or_inside_someone_elses(tmp_path: Path) -> None:
    assert env.git_state(tmp_path / "nowhere") == {"commit": "unknown", "dirty": "unknown"}
    _git(tmp_path, "init", "-q")
    inner = tmp_path / "venv" / "site-packages"
    inner.mkdir(parents=True)
    # an installed zoo inside a user's repository must not report the user's commit
    assert env.git_state(inner) == {"commit": "unknown", "dirty": "unknown"}


def test_git_missing_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert env.git_state() == {"commit": "unknown", "dirty": "unknown"}


def test_cpu_info_reads_cpuinfo_and_falls_back(tmp_path: Path) -> None:
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert env.cpu_info(str(f))["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert env.cpu_info(str(tmp_path / "missing"))["model"]  # platform's answer, or "unknown": never empty


def test_describe_names_gpu_commit_and_packages() -> None:
    e = {"hostname": "h1", "python": "3.11.7", "os": {"platform": "Linux-6"},
         "cpu": {"model": "AMD EPYC", "cores": 64, "usable_cores": 16},
         "gpu": {"names": ["NVIDIA H200"], "driver": "570.1", "cuda": "12.8", "cudnn": 91000},
         "git": {"commit": "0123456789abcdef", "dirty": True}, "packages": {"torch": "2.14.1", "timm": None}}
    text = env.describe(e)
    assert "NVIDIA H200; driver 570.1, CUDA 12.8, cuDNN 91000" in text
    assert "commit 0123456789ab (dirty tree)" in text
    assert "AMD EPYC (64 cores, 16 usable)" in text
    assert "torch 2.14.1" in text and "timm" not in text
    assert env.describe(env.collect()).count("\n") == 4
