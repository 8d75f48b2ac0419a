"""huggingface_hub's offline switch, read here; and a scoped "no downloads" that mutates nothing global.

Checked on huggingface_hub 1.33 (with transformers 5.17) and 2.4 (with transformers 5.23).
"""

from __future__ import annotations

import contextlib
import contextvars
import os

_TRUE = {"1", "ON", "YES", "TRUE"}
# Set only inside `offline_scope()`: a context variable, so it holds for this thread / task alone and
# never changes huggingface_hub's constants or the process environment.
_SCOPED_OFFLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("mmtune_hub_offline", default=False)


def user_offline() -> bool:
    """Whether the user's own environment forbids downloads (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE).

    Reads the environment and `huggingface_hub.constants.HF_HUB_OFFLINE` (set from the environment at
    import; a version-sensitive module constant). Checked on huggingface_hub 1.33 and 2.4.
    """
    env = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    if env.upper() in _TRUE:
        return True
    from huggingface_hub import constants

    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def hub_offline() -> bool:
    """Whether mmtune must not download now: the user's setting, or inside `offline_scope()`.

    mmtune's loading code asks this before it hands a hub id to transformers: offline, a model must be
    a local folder or complete in the cache (`models.hub_files.model_folder`), and every lookup passes a
    local path or `local_files_only=True`, so no request is ever made.
    """
    return _SCOPED_OFFLINE.get() or user_offline()


@contextlib.contextmanager
def offline_scope():
    """Within the block, mmtune's own loading reads only what is on disk (the doctor's checks).

    Replaces a process-wide flip of `HF_HUB_OFFLINE` (environment and huggingface_hub's constant): this
    changes nothing outside mmtune and nothing in other threads. Yields whether the user's environment
    was offline already.
    """
    was = user_offline()
    token = _SCOPED_OFFLINE.set(True)
    try:
        yield was
    finally:
        _SCOPED_OFFLINE.reset(token)


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_UNREACHABLE: dict[str, str | None] = {}  # endpoint -> why it could not be reached (None: reached), once per process


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub endpoint cannot be reached from here, or None when it can (or when that cannot be told).

    One DNS lookup and TCP connect to the endpoint's host (HF_ENDPOINT or huggingface.co), at most `timeout`
    seconds, remembered for the process. Without it, a hub id on a machine with no network costs ~25 s of
    huggingface_hub's retries before the same error. Behind a proxy (HTTP(S)_PROXY / ALL_PROXY) the direct
    connect says nothing about the proxied one: None, and the request goes ahead exactly as before.
    """
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    from urllib.parse import urlparse

    from huggingface_hub import constants

    endpoint = getattr(constants, "ENDPOINT", None) or "https://huggingface.co"
    if endpoint not in _UNREACHABLE:
        import socket

        url = urlparse(endpoint)
        host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            _UNREACHABLE[endpoint] = None
        except OSError as e:  # DNS failure (gaierror), refused, unreachable network, timeout
            _UNREACHABLE[endpoint] = f"{endpoint} cannot be reached from here ({type(e).__name__}: {e})"
    return _UNREACHABLE[endpoint]


__all__ = ["user_offline", "hub_offline", "offline_scope", "hub_unreachable"]
