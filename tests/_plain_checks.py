"""What both plain-path test modules ask of a line check_record refuses (test_collect_plain*.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.collect import journals as col
from harness.core.schema import SchemaError, check_record


def assert_refused_in_its_words(raw: Any, meta: dict, bad: dict, field: str, lineno: int) -> None:
    """check_record refuses ``bad`` on ``field``; the plain path alone never accepts its run, and parse_journal
    refuses it naming line ``lineno`` in check_record's words."""
    with pytest.raises(SchemaError) as schema_exc:
        check_record(bad)
    assert schema_exc.value.field == field
    with pytest.raises((col._NotPlain, col.Refused)):  # the plain path alone never accepts it
        col._parse_journal(raw, meta, False)
    with pytest.raises(col.Refused) as exc:
        col.parse_journal(raw, meta)
    assert f"records.jsonl line {lineno}: {schema_exc.value}" in str(exc.value)
