"""cuDNN's own rankings (Get_v7 heuristic, Find) held against the measured fastest: the analysis and its page."""

from __future__ import annotations

import datetime as dt
import html
import re

from _fleet_data import record, write_run

from harness.analysis.rankings import compare_rankings, summarise
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.records import Ranking
from harness.report import build

T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.timezone.utc)
OK_ = "CUDNN_STATUS_SUCCESS"


def _ranking(source: str, rank: int, algo: str, *, status: str = OK_, time_ms: float | None = None,
             case: str = "c1", math: str = "DEFAULT") -> Ranking:
    return Ranking(case=case, direction="fwd", dtype="fp32", layout="NCHW", math=math, source=source, rank=rank,
                   algo=algo, status=status, time_ms=time_ms, memory_bytes=0, determinism="DETERMINISTIC",
                   math_reported=math)


def _measured() -> list:
    """c1: WINOGRAD fastest (1 ms), the heuristic prefers GEMM (3 ms), Find prefers WINOGRAD; c2 was not ranked."""
    return [record("c1", algo="WINOGRAD", median=1.0), record("c1", algo="GEMM", median=3.0),
            record("c1", algo="FFT", median=1.05), record("c2", algo="GEMM", median=2.0)]


def _rankings() -> list:
    return [_ranking("get_v7", 0, "DIRECT", status="CUDNN_STATUS_NOT_SUPPORTED"),
            _ranking("get_v7", 1, "GEMM"), _ranking("get_v7", 2, "WINOGRAD"),
            _ranking("find", 0, "WINOGRAD", time_ms=1.6), _ranking("find", 1, "FFT", time_ms=1.7)]


def _dicts(rankings: list[Ranking]) -> list[dict]:
    """Rankings as the store gives them back: dicts."""
    return [r.to_dict() for r in rankings]


def test_each_choice_is_held_against_the_measured_fastest_of_its_problem():
    rows = compare_rankings(_dicts(_rankings()), _measured())
    assert len(rows) == 1  # c2 was timed but never ranked: nothing to hold against
    (r,) = rows
    assert (r["best_algo"], r["heuristic_algo"], r["find_algo"]) == ("WINOGRAD", "GEMM", "WINOGRAD")
    assert r["heuristic_cost"] == 3.0 and r["find_cost"] == 1.0  # the first runnable rank, not rank 0
    assert r["find_own_ms"] == 1.6 and r["n_timed"] == 3
    s = summarise(rows)
    assert s["heuristic"]["fastest"] == 0 and s["heuristic"]["noticeable"] == 1 and s["heuristic"]["worst_cost"] == 3.0
    assert s["find"]["fastest"] == 1 and s["find"]["noticeable"] == 0
    assert s["find_own_over_ours"] == 1.6


def test_a_choice_that_was_not_timed_is_said_not_counted_as_fast():
    rankings = _rankings() + [_ranking("get_v7", 0, "ALGO_9", case="c3"), _ranking("find", 0, "ALGO_9", case="c3")]
    measured = _measured() + [record("c3", algo="ALGO_1", median=1.0)]
    rows = {r["case"]: r for r in compare_rankings(_dicts(rankings), measured)}
    assert rows["c3"]["heuristic_cost"] is None and rows["c3"]["heuristic_algo"] == "ALGO_9"
    s = summarise(list(rows.values()))
    assert s["heuristic"]["untimed"] == 1 and s["heuristic"]["timed"] == 1


def _rankings_page(tmp_path, recs: list) -> str:
    """The rankings page of a store holding one run of ``recs``, as text."""
    write_run(tmp_path / "results", "h200", "cu13", T0, recs)
    collect(tmp_path / "s.sqlite", [tmp_path / "results"])
    st = Store(tmp_path / "s.sqlite")
    try:
        build(st, tmp_path / "site")
    finally:
        st.close()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "site" / "rankings.html").read_text())).split())


def test_the_rankings_page_shows_them_and_investigations_links_it(tmp_path):
    text = _rankings_page(tmp_path, [*_measured(), *_rankings()])
    assert "1 problems ranked and timed" in text and "The heuristic's choice was the fastest in 0 , 1 times" in text
    assert "c1 fwd fp32 NCHW DEFAULT WINOGRAD 1 ms GEMM 3.00 WINOGRAD 1.00 1.6 ms 3" in text
    assert 'href="rankings.html"' in (tmp_path / "site" / "investigations.html").read_text()
    assert "Find ranked" not in text  # every problem has Find's ranking here


def test_problems_without_find_ranking_say_so(tmp_path):
    """A backward sweep records Get_v7's ranking only unless --find: its problems are "not ranked" by Find, counted
    apart from a Find choice that was not timed, and the page says why."""
    rankings = _rankings() + [_ranking("get_v7", 0, "GEMM", case="c2")]
    rows = {r["case"]: r for r in compare_rankings(_dicts(rankings), _measured())}
    assert rows["c2"]["find_algo"] is None and rows["c2"]["heuristic_algo"] == "GEMM"
    s = summarise(list(rows.values()))
    assert s["find"]["ranked"] == 1 and s["heuristic"]["ranked"] == 2 and s["find"]["untimed"] == 0
    text = _rankings_page(tmp_path, [*_measured(), *rankings])
    assert "Find ranked 1 of the 2 problems" in text and "only with --find" in text
    assert "c2 fwd fp32 NCHW DEFAULT GEMM 2 ms GEMM 1.00 not ranked - -" in text
