"""Errors a user can cause, with the one-line message and exit code the CLI gives them."""

import re

EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3  # the host lacks what the command needs (GPU, library, engine)
EXIT_NO_DATA = 4  # `compare` had nothing to decide on (no records, nothing in common): neither pass (0) nor fail (1)

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences, CR, bidi overrides) shown escaped,
    so a file, machine or case name cannot move the cursor, rewrite a line or recolour the screen."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                            else f"\\u{ord(m.group()):04x}", str(text))


class UserError(Exception):
    """An error with a one-line message for the user and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code
