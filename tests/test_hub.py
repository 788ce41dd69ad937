"""zoo.hub asks the hub client itself whether the hub answers, so proxies, mirrors and offline mode count."""

from __future__ import annotations

import http.server
import threading

import huggingface_hub.constants as constants
import pytest

from zoo.kit import hub


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    hub.hub_online.cache_clear()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield
    hub.hub_online.cache_clear()


class _Answer(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_HEAD(self):  # noqa: N802
        _Answer.seen.append(self.path)
        self.send_response(401)  # any status: the server is reachable
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


def _serve():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_reachable_endpoint_is_online(monkeypatch):
    """HF_ENDPOINT (a mirror) is honoured: here a local server stands in for it."""
    server = _serve()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        assert hub.hub_online()
        assert _Answer.seen and _Answer.seen[-1].startswith("/api/models/")
    finally:
        server.shutdown()


def test_traffic_goes_through_the_configured_proxy(monkeypatch):
    """Behind a proxy, the check asks the proxy (the old raw socket check went straight to the host)."""
    proxy = _serve()
    try:
        from huggingface_hub.utils import close_session

        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
        monkeypatch.setenv("NO_PROXY", "")
        monkeypatch.setattr(constants, "ENDPOINT", "http://hub.invalid")
        close_session()  # the client reads proxy variables when its session is made
        before = len(_Answer.seen)
        assert hub.hub_online()
        assert len(_Answer.seen) == before + 1 and "hub.invalid" in _Answer.seen[-1]
    finally:
        close_session()
        proxy.shutdown()


def test_unreachable_sets_offline_mode(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert not hub.hub_online()
    assert constants.HF_HUB_OFFLINE is True
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_offline_setting_is_respected_without_traffic(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    before = len(_Answer.seen)
    assert not hub.hub_online()
    assert len(_Answer.seen) == before
