"""``json.dumps(x, sort_keys=True)`` of many parsed JSON values at once, the same text, a quarter of the time.

The store keeps a record's extra as that text. Python's encoder spends most of a real line's 2.7 us on float
repr and its own layers; orjson writes the same values in 0.3 us but in another spelling: no space after ``,``
and ``:``, a one-digit exponent (``1e-7``, Python ``1e-07``), plain decimals down to 1e-5 (``0.00001``, Python
``1e-05``) and strings as UTF-8 (Python escapes what is not printable ASCII). So a run's values are written by
one orjson call, and what lies between their strings is respelled in a few passes over the whole run; a run that
orjson cannot write (an integer beyond 64 bits) or whose strings hold an escape or a byte that is not printable
ASCII is written by Python's encoder instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def _python_encoder() -> Callable[[Any], str]:
    """json.dumps(x, sort_keys=True) of parsed JSON, without the Python layers json.dumps adds to its C encoder on
    every call. Parsed JSON holds no cycles and nothing the encoder cannot write, so neither the cycle check nor
    a default is needed."""
    if c_make_encoder is None:  # pragma: no cover - a Python without json's C accelerator
        return json.JSONEncoder(sort_keys=True).encode

    def unwritable(o: Any) -> Any:
        raise TypeError(f"{type(o).__name__} is not JSON")

    chunks = c_make_encoder(None, unwritable, encode_basestring_ascii, None, ": ", ", ", True, False, True)
    return lambda o: "".join(chunks(o, 0))


encode = _python_encoder()

_SHORT_EXPONENT = re.compile(rb"e-(\d)(?!\d)")  # orjson 1e-7, Python 1e-07
_SMALL_DECIMAL = re.compile(rb"0\.0000\d+")  # below 1e-4: orjson 0.00001, Python 1e-05 (a literal start: fast)
_SEPARATOR = "0"  # between a run's values in orjson's one text of them all
_SPLIT, _TAIL = b',"0",', b',"0"]'


def _python_float(m: re.Match) -> bytes:
    """A small decimal of orjson's as Python writes it, unless it is the tail of a longer number (10.00001)."""
    if m.start() and m.string[m.start() - 1] in b"0123456789.":
        return m[0]
    return repr(float(m[0])).encode()


def _respelled(outside: bytes) -> bytes:
    """orjson's text outside strings as Python's encoder spells it."""
    outside = outside.replace(b",", b", ").replace(b":", b": ")
    if b"e-" in outside:
        outside = _SHORT_EXPONENT.sub(rb"e-0\1", outside)
    if b"0.0000" in outside:
        outside = _SMALL_DECIMAL.sub(_python_float, outside)
    return outside


def encode_all(values: list[Any]) -> list[str | None]:
    """``encode`` of each value (None stays None), the same text as json.dumps(value, sort_keys=True)."""
    if _orjson is None or not values:
        return [None if v is None else encode(v) for v in values]
    try:  # one call for the run: a text per value costs five times more (an allocation each)
        buf = _orjson.dumps([x for v in values for x in (v, _SEPARATOR)], option=_orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a nesting deeper than orjson's
        return [None if v is None else encode(v) for v in values]
    # [v1,"0",v2,"0",...,vn,"0"] -> a line a value (orjson writes no raw newline); a value holding the string "0"
    # in a list splits into more lines than values, and what is not printable ASCII Python escapes: Python's
    buf = buf[1:-len(_TAIL)].replace(_SPLIT, b"\n")
    if buf.count(b"\n") != len(values) - 1 or not buf.isascii() or b"\\" in buf or b"\x7f" in buf:
        return [None if v is None else encode(v) for v in values]
    # no escapes: every other '"' opens a string; respell what lies between strings, all of it at once
    parts = buf.split(b'"')
    outside = parts[0::2]
    if len(outside) > 1:
        parts[0::2] = _respelled(b"\0".join(outside)).split(b"\0")  # \0 only here: orjson escapes it
        buf = b'"'.join(parts)
    else:
        buf = _respelled(buf)
    return [None if s == "null" else s for s in buf.decode("ascii").split("\n")]
