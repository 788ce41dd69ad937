"""GAN test fixtures: a private classifier cache, tiny modules and trainers."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def gan_cache(tmp_path_factory, monkeypatch):
    """The built-in evaluation classifier is cached per test session, never in the user's ~/.cache."""
    path = tmp_path_factory.getbasetemp() / "zoo-cache"
    monkeypatch.setenv("ZOO_CACHE", str(path))
    return path
