"""The one finalize step (run/finalize.py): every driver's records are classified and explained by it, and what
it says of the committed H200 studies is what they journaled when each driver still explained its own."""

from __future__ import annotations

import collections
import copy

from _fleet_data import run_tarball

from harness.core.records import CRASHED, ERROR, OK, OOM, Ranking, Record
from harness.run.finalize import classify, finalize


def test_autotune_and_crosscheck_words_are_those_journaled():
    """The newest study (2026-11-30); the older h200-autotune holds one torch record worded by an earlier rule."""
    _, _, recs = run_tarball("h200x2-autotune-cudnn927")
    studied = [d for d in recs if d.get("kind") in ("autotune", "crosscheck")]
    assert {d["kind"] for d in studied} >= {"autotune"}
    for d in studied:
        rec = Record.from_dict(copy.deepcopy(d))
        rec.explanation = "stale"
        if rec.kind == "autotune":  # the journal sorts keys; the producer counted winners in trial order
            rec.extra["winners"] = dict(collections.Counter(
                f"{t['winner']} ({t['math']})" if "winner" in t else t["same_bits_as"] for t in rec.extra["trials"]))
        assert finalize(rec).explanation == d["explanation"], rec.key()


def test_an_error_that_ran_out_of_memory_is_classified_and_explained():
    rec = Record(case="c", backend="b", direction="fwd", algo="a", math="m", dtype="fp32", layout="NCHW",
                 status=ERROR, reason="OutOfMemoryError: CUDA out of memory", kind="autotune")
    assert finalize(rec).status == OOM and rec.explanation.startswith(OOM)
    crashed = Record(case="c", backend="b", direction="fwd", algo="a", math="m", dtype="fp32", layout="NCHW",
                     status=CRASHED, reason="the worker died of SIGSEGV", kind="crosscheck")
    assert classify(crashed).status == CRASHED and "SIGSEGV" in finalize(crashed).explanation


def test_a_producer_that_explains_its_own_records_keeps_its_words():
    rec = Record(case="c", backend="ort", direction="fwd", algo="auto", math="m", dtype="fp32", layout="NCHW",
                 status=OK, explanation="5 fresh sessions in one process: 1 distinct output(s)")
    assert finalize(rec, by_producer=True).explanation.startswith("5 fresh sessions")
    ranking = Ranking(case="c", direction="fwd", dtype="fp32", layout="NCHW", math="DEFAULT", source="find", rank=0,
                      algo="a", status="CUDNN_STATUS_SUCCESS", time_ms=1.0, memory_bytes=0,
                      determinism="DETERMINISTIC", math_reported="DEFAULT")
    assert finalize(ranking) is ranking
