"""Fixtures shared by every domain's tests (helpers live in zoo/testing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.testing import make_runner


@pytest.fixture
def run_zoo(tmp_path: Path):
    """run_zoo("train", "task=...", ...) -> CompletedProcess (stdout+stderr in .stdout), cwd = tmp_path."""
    return make_runner(tmp_path)
