"""Log a warning once per cause, not once per call: a hint that names a GPU the machine does
not have is one cause, however many calls and steps meet it.

The causes already logged are kept in a bounded set (`MAX_CAUSES`; beyond it the oldest is
forgotten, and logged again if it comes back).

>>> import logging
>>> log = logging.getLogger("doctest.log_once")
>>> warn_once(log, ("doctest", 1), "a cause"), warn_once(log, ("doctest", 1), "a cause")
(True, False)
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable

MAX_CAUSES = 512
"""How many distinct causes are remembered."""

_SEEN: OrderedDict[Hashable, None] = OrderedDict()
_LOCK = threading.Lock()


def warn_once(logger: logging.Logger, cause: Hashable, msg: str, *args: object) -> bool:
    """``logger.warning(msg, *args)`` the first time ``cause`` is seen; True if it logged."""
    key = (logger.name, cause)
    with _LOCK:
        if key in _SEEN:
            return False
        _SEEN[key] = None
        while len(_SEEN) > MAX_CAUSES:
            _SEEN.popitem(last=False)
    logger.warning(msg, *args)
    return True
