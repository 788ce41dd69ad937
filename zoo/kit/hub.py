"""Fast, honest network checks before any hub download.

Offline, a hub download retries for ~45 s before giving up; one HEAD request through the hub client answers in about
a second. It goes through huggingface_hub's own session, so it honours what the downloads themselves honour:
HF_HUB_OFFLINE, HF_ENDPOINT (a mirror) and HTTPS_PROXY/HTTP_PROXY/NO_PROXY.
"""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")


def _offline_by_setting() -> bool:
    import huggingface_hub.constants as constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE


@functools.cache
def hub_online(timeout: float = 3.0) -> bool:
    """True when the Hugging Face endpoint answers (any HTTP status counts: the server is reachable).

    Offline it also sets HF_HUB_OFFLINE=1, so that transformers/timm/huggingface_hub read only their local cache
    instead of retrying each file.
    """
    if _offline_by_setting():
        return False
    import huggingface_hub.constants as constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(f"{constants.ENDPOINT}/api/models/bert-base-uncased", timeout=timeout)
        return True
    except Exception as e:  # noqa: BLE001 - the HTTP client's connect, proxy, TLS and timeout errors alike
        _go_offline()
        log.info("%s is unreachable (%s): Hugging Face libraries will use only the local cache",
                 constants.ENDPOINT, type(e).__name__)
        return False


def _go_offline() -> None:
    # huggingface_hub reads HF_HUB_OFFLINE once at import: update its constant as well as the environment.
    import huggingface_hub.constants as constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
