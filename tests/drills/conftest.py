"""The drills import their harness (tests/drills/harness.py) by name."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
from harness import TOY, VISION, Step, image_folder, run_step  # noqa: E402


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> dict[str, Path]:
    """Trained once for all rows: a toy run, a tiny vision run on two classes of images, its image folder."""
    base = tmp_path_factory.mktemp("drill-assets")
    images = base / "images"
    image_folder(images, ("ants", "bees"))
    out = {"toy": base / "toy", "vision": base / "vision", "images": images}
    for name, args in (("toy", TOY), ("vision", [*VISION, f"task.data.root={images}"])):
        rc, console = run_step(base, Step(["train", *args, f"hydra.run.dir={out[name]}"]))
        assert rc == 0, console[-3000:]
    return out
