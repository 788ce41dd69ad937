"""A PPO run's fixed start-up and shutdown costs: torchmetrics' optional integrations left out of the import
(zoo/imports.py, declared by the rl/ppo task) and the imported objects frozen out of the cyclic GC."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

OPTIONAL = ["transformers", "torchvision", "scipy", "matplotlib"]


def python(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip()


def test_lightning_imports_without_the_optional_packages_which_stay_importable() -> None:
    out = python(f"""
        import sys
        from zoo.imports import install
        assert install({OPTIONAL!r})
        import lightning.pytorch, torchmetrics, torch
        print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))
        acc = torchmetrics.MeanMetric()  # torchmetrics itself works
        acc.update(torch.tensor([1.0, 3.0]))
        print(float(acc.compute()))
        print([type(f).__name__ for f in sys.meta_path if type(f).__module__ == "zoo.imports"])
        print(install({OPTIONAL!r}), install([]))  # nothing to do once torchmetrics is imported
        import scipy.signal, matplotlib  # afterwards they import as usual
        print(scipy.signal.__name__, torchmetrics.__spec__.loader.__class__.__name__)
        """)
    assert out.splitlines() == ["[]", "2.0", "[]", "False False", "scipy.signal SourceFileLoader"]


def test_the_ppo_task_declares_the_lean_imports() -> None:
    """The rl/ppo task (and so every rl preset) asks Hydra to install the finder before the job imports Lightning."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from zoo.core.config import CONFIG_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("train", ["experiment=rl_cartpole", "run_dir=/tmp/zoo-test-run"], return_hydra_config=True)
    callback = instantiate(cfg.hydra.callbacks.lean_imports)
    assert sorted(callback.absent) == sorted(OPTIONAL)


def test_freeze_imports_once_per_process() -> None:
    from zoo.rl.module import freeze_imports

    try:
        freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # torch, Lightning, gymnasium ... are out of the GC's walks
        freeze_imports()
        assert gc.get_freeze_count() == frozen  # a second run in the process: its objects are collected as usual
    finally:
        gc.unfreeze()  # the test session's other objects stay collectable
