"""The domains install as zoo.vision, zoo.nlp, ... (links zoo/<domain> -> ../<domain>), so no top-level name of theirs
enters site-packages, where other distributions own `nlp`, `rl`, `vision`, `speech` and `gan`; checkpoints written
while the domains were top-level packages still test, predict and resume (zoo.core.aliases)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from zoo.core.aliases import DOMAINS
from zoo.testing import ROOT, TINY, compose, tone_manifest, zoo_env

ONE = {"OMP_NUM_THREADS": "1"}


def test_each_domain_is_a_link_inside_the_zoo_package():
    for domain in DOMAINS:
        link = ROOT / "zoo" / domain
        assert link.is_symlink() and link.resolve() == (ROOT / domain).resolve(), domain


def test_the_wheel_holds_only_the_zoos_own_top_level_names(tmp_path):
    # built from a copy: setuptools writes build/ and *.egg-info beside the sources
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("zoo", "hydra_plugins", *DOMAINS):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(tmp_path), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"zoo", "hydra_plugins"}, tops
    for domain in DOMAINS:
        assert f"zoo/{domain}/module.py" in names, domain


# ------------------------------------------------------------------------- beside another owner of an old name
@pytest.mark.slow
def test_the_zoo_runs_beside_a_distribution_owning_nlp(tmp_path):
    """A package named `nlp` (Hugging Face's `nlp` 0.4.0 is one) first on the path: `import nlp` is theirs, and the
    zoo's nlp task trains without ever importing it."""
    site = tmp_path / "site"
    (site / "nlp").mkdir(parents=True)
    marker = tmp_path / "other-nlp-imported"
    (site / "nlp" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').close()\nOWNER = 'another distribution'\n")
    env = {**zoo_env(tmp_path, **ONE), "PYTHONPATH": str(site)}  # the checkout itself is not on the path
    theirs = subprocess.run([sys.executable, "-c", "import nlp; print(nlp.OWNER)"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert theirs.stdout.strip() == "another distribution" and marker.exists()
    marker.unlink()
    proc = subprocess.run([sys.executable, "-m", "zoo", "train", "task=nlp/bert", "task.data.builtin_size=64", *TINY,
                           "hydra.run.dir=run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert not marker.exists(), "the zoo imported the other distribution's nlp"


# ------------------------------------------------------------------------------------ old checkpoints still work
def _old_names(node):
    """A record as the zoo wrote it before the move: `zoo.vision.x` named `vision.x`."""
    if isinstance(node, dict):
        return {k: _old_names(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_old_names(v) for v in node]
    if isinstance(node, str):
        for domain in DOMAINS:
            node = node.replace(f"zoo.{domain}.", f"{domain}.")
            if node == f"zoo.{domain}":
                node = domain
        return node
    return node


def _picture(where: Path) -> str:
    from PIL import Image

    Image.new("RGB", (20, 20), (200, 30, 30)).save(where / "pic.png")
    return str(where / "pic.png")


# tiny settings per domain, and what predict is given
DOMAIN_RUNS = {
    "vision": (["task=vision/resnet", "task.module.arch=resnet10t", "task.data.image_size=16",
                "task.module.pretrained=false"], lambda w: [f"input={_picture(w)}"]),
    "nlp": (["task=nlp/bert", "task.data.builtin_size=64"], lambda w: ["input=a fine film"]),
    "rl": (["task=rl/ppo", "task.module.num_steps=32", "task.module.total_timesteps=256"],
           lambda w: ["predict.episodes=1"]),
    "speech": (["experiment=speech_fsdd_manifests", "task.module.model={hidden: 16, layers: 1}",
                "task.module.n_mels=16", "task.data.chars='one two'"], lambda w: [f"input={w / '0.wav'}"]),
    "gan": (["task=gan/dcgan", "task.module.width=8", "task.module.eval_train_steps=3", "task.data.batch_size=16"],
            lambda w: ["predict.num=2", f"predict.out={w / 'samples'}"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("domain", list(DOMAIN_RUNS))
def test_a_checkpoint_naming_the_old_top_level_packages_tests_predicts_and_resumes(run_zoo, tmp_path, domain):
    settings, predict_args = DOMAIN_RUNS[domain]
    if domain == "speech":
        settings = [*settings, *tone_manifest(tmp_path)]
    # a recorded override naming a class, as `task.data._target_=speech.data.ManifestDataModule` did in the docs
    settings = [*settings, f"task.module._target_={compose(settings).task.module._target_}"]
    env = {**ONE, "PYTHONPATH": ""}  # as installed: the checkout's top-level folders are not importable
    train = run_zoo("train", *settings, *TINY, "hydra.run.dir=run", env=env, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["zoo"] = _old_names(ckpt["zoo"])
    assert f"_target_={domain}.module." in str(ckpt["zoo"]["overrides"]) and f"zoo.{domain}." not in str(ckpt["zoo"])
    torch.save(ckpt, last)

    tested = run_zoo("test", f"ckpt_path={last}", env=env, timeout=600)
    assert tested.returncode == 0 and "Traceback" not in tested.stdout, tested.stdout[-3000:]
    predicted = run_zoo("predict", f"ckpt_path={last}", *predict_args(tmp_path), env=env, timeout=600)
    assert predicted.returncode == 0 and "Traceback" not in predicted.stdout, predicted.stdout[-3000:]
    resumed = run_zoo("train", f"ckpt_path={last}", "trainer.max_epochs=2", env=env, timeout=600)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stdout, resumed.stdout[-3000:]
