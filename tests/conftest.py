"""Fixtures shared by every domain's tests (helpers live in zoo/testing.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from zoo.testing import make_runner


@pytest.fixture
def run_zoo(tmp_path: Path):
    """run_zoo("train", "task=...", ...) -> CompletedProcess (stdout+stderr in .stdout), cwd = tmp_path."""
    return make_runner(tmp_path)


@pytest.fixture(autouse=True)
def _ctrl_c_reaches_children():
    """A shell starts a background job (`pytest ... &`) with SIGINT ignored, which every child inherits: a Ctrl-C
    sent to a `zoo` child would then do nothing. Children of a process with a handler start with the default."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
