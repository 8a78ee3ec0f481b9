"""Tracing on, LangSmith unreachable: one clear line, and tracing off instead of a stall.

With ``LANGSMITH_TRACING=true`` and an endpoint nobody answers on, LangSmith's client
retries every batch with back-off, logs each failure with the run ids of the batch, and
holds the process at exit (about 12 s) to flush what it queued. `check_langsmith` runs when
a `DeviceToolNode` or the middleware is built, while tracing is on by the environment alone
(not inside a traced run), once per process and endpoint: it opens a
TCP connection to the endpoint's host and port (at most `CONNECT_TIMEOUT_S`). When that
fails it logs one warning on the ``langgraph_devsched`` logger and turns LangSmith tracing
off for the process (``langsmith.configure(enabled=False)``), so no run is queued; the
decisions stay in ``node.history`` and the INFO log. Behind a proxy (the proxy variables
apply to the endpoint) it checks nothing; ``DEVSCHED_LANGSMITH_CHECK=0`` turns it off.

>>> check_langsmith() is None  # tracing is off here: nothing to check
True
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("langgraph_devsched")

CONNECT_TIMEOUT_S = 1.0
"""How long the one reachability check may wait for the endpoint's TCP handshake."""
CHECK_ENV = "DEVSCHED_LANGSMITH_CHECK"
"""Set to ``0`` to skip the check (and keep tracing on whatever happens)."""

_lock = threading.Lock()
_last: tuple[str, str | None] | None = None
"""The endpoint checked last and the warning it gave (one entry: the check's only state)."""

Connect = Callable[..., Any]


def check_langsmith(*, connect: Connect = socket.create_connection) -> str | None:
    """The warning logged when tracing is on and its endpoint unreachable (tracing is then
    off for the process), else None (off, skipped, behind a proxy, or reachable)."""
    global _last
    if os.environ.get(CHECK_ENV, "1").strip() == "0":
        return None
    try:
        from langsmith import utils as ls_utils
    except ImportError:  # pragma: no cover - langsmith comes with langchain-core
        return None
    if not _traced_by_environment(ls_utils):
        return None
    url = ls_utils.get_api_url(None)
    with _lock:
        if _last is not None and _last[0] == url:
            return _last[1]
        warning = _unreachable(url, connect)
        _last = (url, warning)
    if warning is not None:
        logger.warning(warning)
        from langsmith.run_trees import configure

        configure(enabled=False)
    return warning


def _traced_by_environment(ls_utils: Any) -> bool:
    """Tracing is on by ``LANGSMITH_TRACING`` alone: not set by a tracing context or
    ``langsmith.configure``, and not inside a traced run (whose tracer may bring its own
    client: a node built mid-run, e.g. by the middleware, is not second-guessed)."""
    import langsmith._internal._context as ls_context
    from langsmith.run_helpers import get_current_run_tree, get_tracing_context

    if get_tracing_context()["enabled"] is not None or get_current_run_tree() is not None:
        return False
    if getattr(ls_context, "_GLOBAL_TRACING_ENABLED", None) is not None:
        return False
    return bool(ls_utils.tracing_is_enabled() is True)


def _unreachable(url: str, connect: Connect) -> str | None:
    """Why ``url`` cannot be reached, or None (reachable, or not checkable directly)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    if urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        connect((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return (f"LangSmith tracing is on but {url} is unreachable ({why}): tracing is off "
                f"for this process (decisions stay in node.history; {CHECK_ENV}=0 skips "
                "this check)")
    return None
