"""Fast, honest network checks before any hub download.

Offline, huggingface_hub retries for ~45 s before giving up; one DNS lookup + TCP connect answers in about a second.
"""

from __future__ import annotations

import functools
import logging
import os
import socket

log = logging.getLogger(__name__)

HF_HOST = "huggingface.co"


@functools.lru_cache(maxsize=None)
def hub_online(host: str = HF_HOST, timeout: float = 2.0) -> bool:
    """True when `host` answers on 443. Offline (or with HF_HUB_OFFLINE=1) it also sets HF_HUB_OFFLINE=1,
    so transformers/timm/huggingface_hub read only their local cache instead of retrying."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        os.environ["HF_HUB_OFFLINE"] = "1"
        _refresh_hf_offline_flag()
        log.info("%s is unreachable: Hugging Face libraries will use only the local cache", host)
        return False


def _refresh_hf_offline_flag() -> None:
    # huggingface_hub reads HF_HUB_OFFLINE once at import; update its constant when it is already imported.
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and hasattr(constants, "HF_HUB_OFFLINE"):
        constants.HF_HUB_OFFLINE = True
