"""Fixtures shared by the vision tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture()
def one_thread():
    """On a busy 2-core machine torch's second thread spins: a 16 px step took 3.6 s with 2 threads, 0.07 s with 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
