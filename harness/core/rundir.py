"""The run directory's file names: the written contract that the journal (run/journal.py) writes and collect reads.

    <results>/<machine>/<run_id>/run.json        who/where/what: fingerprint, options, suite revision
    <results>/<machine>/<run_id>/records.jsonl   one record or ranking per line, appended as made, fsynced by each writer
    <results>/<machine>/<run_id>/end.json        written at the end; absent if interrupted
    <results>/<machine>/<run_id>/records.packed  the finished journal as the store keeps it (collect/packed.py)
"""

from __future__ import annotations

RUN_FILE = "run.json"
JOURNAL_FILE = "records.jsonl"
END_FILE = "end.json"
PACKED_FILE = "records.packed"
