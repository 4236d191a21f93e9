"""Where Python-side messages go.

Messages that are not part of ``verbose=True``'s reports (warnings about
options that have no effect, cache hits, a guessed chat format) go to the
"llamapy" logger when ``verbose`` is False, so an application sees them only
through its own logging set-up; a NullHandler keeps Python's last-resort
handler from printing them. With ``verbose=True`` they are printed to stderr
with the reports instead (not both, so an application with logging on stderr
does not see them twice).
"""
from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger("llamapy")
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())

PREFIX = "llamapy: "


def emit(verbose: bool, level: int, msg: str, *args: Any) -> None:
    """A message for the user: printed to stderr with verbose, else logged."""
    if verbose:
        print(PREFIX + (msg % args if args else msg), file=sys.stderr, flush=True)
    else:
        logger.log(level, msg, *args)
