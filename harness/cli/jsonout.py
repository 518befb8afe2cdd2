"""``--json`` for the commands a machine reads: one shape for all of them.

Every document carries ``"schema": SCHEMA`` (bumped when a field changes meaning or goes away), numbers are
numbers (milliseconds as ``*_ms`` floats, never "49.1 ms" strings), and nothing is NaN or Infinity, so any strict
JSON reader takes it.
"""

from __future__ import annotations

import json
import math
from typing import Any

SCHEMA = 1


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help=f"print the result as one JSON document (schema {SCHEMA}) instead of text")


def _finite(value: Any) -> Any:
    """NaN and infinities become null: strict JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(doc: dict[str, Any]) -> str:
    """``doc`` with the schema version first, as strict JSON."""
    return json.dumps(_finite({"schema": SCHEMA, **doc}), indent=1, default=str, allow_nan=False)


def emit(doc: dict[str, Any]) -> None:
    print(dumps(doc))
