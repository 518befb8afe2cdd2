"""The one error contract of convbench: errors a user can cause, and how the CLI says them.

``UserError`` carries a one-line message and the exit code the CLI gives it (``EXIT_USAGE``, ``EXIT_ENVIRONMENT``,
``EXIT_NO_DATA``); ``printable`` makes a name from another host's file safe to show on a terminal. Every layer
raises these, so they live here, apart from the reading of untrusted files (core/intake.py).
"""

from __future__ import annotations

import re

EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3  # the host lacks what the command needs (GPU, library, engine)
EXIT_NO_DATA = 4  # `compare` had nothing to decide on (no records, nothing in common): neither pass (0) nor fail (1)

UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences, CR, bidi overrides) shown escaped,
    so a file, machine or case name cannot move the cursor, rewrite a line or recolour the screen; and a path's
    bytes that are not UTF-8 (lone surrogates, which no UTF-8 stream can print) shown as their escapes."""
    return UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                           else f"\\u{ord(m.group()):04x}", str(text))


class UserError(Exception):
    """An error with a one-line message for the user and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code
