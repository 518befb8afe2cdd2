"""The three numbers a change to the time gate's `wide` veto must keep, for the rule in force and the candidates
tried (docs/evidence/2026-12-01-session12-gate.md), on the committed device data:

  (a) failing findings in each committed A/A pair (tests/fixtures/runs/*aa*.tar.gz, judged as tests/test_paired.py
      judges them: harness.run.judgement.judge), and the pairs of the two committed eight-night series that fail
      (`compare --store` with five nights of history, as tests/test_gate_history.py);
  (b) device-injected detection power of the detection-power studies (scripts/gpu/detection_power.py --judge:
      the H200's of 2026-12-01, 03:59 UTC without placement medians and 12:20 UTC with them, two of an H100 on
      2026-12-07 and one of another H200 that evening), and the 03:59 study's calls under 50 us with
      their placement medians read back from the order of their samples (batches rotate through the placements,
      8 samples a batch for these calls; checked exact on every 12:20 record under 50 us);
  (c) software-injected nightly power on the eight nights of 09:54 (scripts/calibrate_gate.py --nightly-power).

A candidate replaces timechange.placements_apart, which time_verdict asks only about records whose samples are
only `wide` and whose placements do not overlap; "current" is the rule in force, "veto" none at all. A "close"
candidate replaces timechange.placements_close instead, the veto of any change whose sides'
placements are apart by less than their spread, with the wide rule in force. "moved" and "without-moved" keep both
and ask whether a change that moved every placement past the threshold, placement by placement, lifts the overlap
and close vetoes (timechange.placements_moved) or not. `floor=US` judges everything with another absolute floor
than thresholds.ABS_FLOOR_US, for each rule named.

    python3 scripts/gate_rules.py [RULE ...] [floor=US ...]
"""

from __future__ import annotations

import itertools
import json
import lzma
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "scripts" / "gpu")]

import calibrate_gate  # noqa: E402
import detection_power  # noqa: E402

from harness.analysis import paired_judgement as judgement  # noqa: E402
from harness.analysis import thresholds, timechange  # noqa: E402
from harness.analysis.compare import compare_runs, gate  # noqa: E402
from harness.analysis.timechange import Thresholds  # noqa: E402
from harness.collect.ingest import read_runs_into  # noqa: E402
from harness.collect.store import Store  # noqa: E402
from harness.core.errors import UserError  # noqa: E402
from harness.measurement.timing import median_rel_stderr  # noqa: E402

RUNS = ROOT / "tests" / "fixtures" / "runs"
EVIDENCE = ROOT / "docs" / "evidence"
STUDIES = {"03:59": "2026-12-01-h200-session8", "12:20": "2026-12-01-h200-session11",
           "H100 07:29": "2026-12-07-h100-bwd/power-1", "H100 07:34": "2026-12-07-h100-bwd/power-2",
           "H200 17:40": "2026-12-07-h200-158103a5"}
NIGHTS = ("h200-repeat8-fwd", "h200x2-repeat8-fwd")
CURRENT = timechange.placements_apart
CLOSE = timechange.placements_close  # the veto of placements apart by less than their spread (any samples)
MOVED = timechange.placements_moved  # placement by placement past the threshold: lifts the two vetoes above


# --- the candidates: (base, head, slower, alpha) -> (gap, spread, p) to decide, None to veto ---

def _sides(base, head, min_n, processes):
    b, h = timechange.placement_levels(base), timechange.placement_levels(head)
    if len(b) < min_n or len(h) < min_n:
        return None
    if processes and not (timechange.process_levels(base) and timechange.process_levels(head)):
        return None
    return b, h


def samples_decide(base, head, slower, alpha, draws=True):
    """The veto lifted: the samples' rank test and bootstrap interval decide, as for trusted samples (with
    ``draws``, only where both sides have draws, which time_verdict has already found apart)."""
    if draws and not (timechange.draws(base) and timechange.draws(head)):
        return None
    sa, sb = base.samples, head.samples
    p = timechange.mann_whitney_greater(sa, sb)[1] if slower else timechange.mann_whitney_greater(sb, sa)[1]
    _, lo, hi = timechange.bootstrap_median_ratio(sa, sb)
    return (0.0, 0.0, p) if p < alpha and (lo > 1.0 if slower else hi < 1.0) else None


def stderr_decide(base, head, slower, alpha):
    """The veto lifted where each side's median is known to a quarter of the band's threshold (robust standard
    error from the stored samples' IQR and the timer's sample count): then the samples decide."""
    rel = Thresholds().rel(base.median_ms)
    for rec in (base, head):
        s = [float(x) for x in rec.samples]
        se = median_rel_stderr(s) * math.sqrt(len(s) / (rec.time.n or len(s)))
        if se > rel / 4:
            return None
    return samples_decide(base, head, slower, alpha, draws=False)


def rank(processes):
    """Exact rank test on the placement medians (separated sets: p = 1 / C(m + n, m)): `gap` with k = 0."""
    return gap(0, processes)


def welch(processes):
    """One-sided Welch t on the placement medians, at the 1 % critical t of the smaller side's degrees of freedom."""
    crit = {2: 6.965, 3: 4.541, 4: 3.747, 5: 3.365, 6: 3.143, 7: 2.998, 8: 2.896, 9: 2.821}
    def rule(base, head, slower, alpha):
        sides = _sides(base, head, 3, processes)
        if sides is None:
            return None
        b, h = np.asarray(sides[0]), np.asarray(sides[1])
        se = math.sqrt(b.var(ddof=1) / len(b) + h.var(ddof=1) / len(h))
        t = (h.mean() - b.mean()) / se * (1 if slower else -1) if se else math.inf
        return (*timechange.placement_gap(b, h, slower), 0.0) if t > crit[min(len(b), len(h)) - 1] else None
    return rule


def gap(k, processes):
    """Every head placement beyond every base placement by more than k times either side's placement spread."""
    def rule(base, head, slower, alpha):
        sides = _sides(base, head, 3, processes)
        if sides is None:
            return None
        g, spread = timechange.placement_gap(*sides, slower)
        p = 1 / math.comb(len(sides[0]) + len(sides[1]), len(sides[0]))
        return (g, spread, p) if g > k * spread and p < alpha else None
    return rule


RULES = {
    "veto": lambda *a: None,
    "lift-where-draws-apart": samples_decide,
    "lift-where-median-known": stderr_decide,
    "rank-placements": rank(False), "rank-placements-2proc": rank(True),
    "welch-placements": welch(False), "welch-placements-2proc": welch(True),
    "gap>spread": gap(1.0, False), "gap>0.5spread-2proc": gap(0.5, True), "gap>2spread-2proc": gap(2.0, True),
    "current": CURRENT,  # gap > spread, two processes a side
}


def close_within(k):
    """A change whose sides' placements are apart by no more than k times one side's spread is ambiguous."""
    return lambda base, head, slower: CLOSE(base, head, slower, share=k)


# the veto of placements apart by less than their spread, beside the wide rule in force ("current" keeps both)
CLOSE_RULES = {"without-close": lambda *a: None, "close<=0.5spread": CLOSE,
               "close<=spread": close_within(1.0), "close<=2spread": close_within(2.0)}
# whether placements moved placement by placement past the threshold lifts the overlap and close vetoes
MOVED_RULES = {"without-moved": lambda *a: False, "moved": MOVED}


# --- the data ---

def aa_pairs():
    """(name, A records, B records) of every committed A/A study leg."""
    out = []
    for tarball in sorted(RUNS.glob("*aa*.tar.gz")):
        store = Store(":memory:")
        read_runs_into(store, [tarball])
        legs: dict = {}
        for run in store.runs():
            p = store.run_json(run["id"])["options"]["paired"]
            legs.setdefault((str(p.get("study")), str(p["gpu"])), {})[p["role"]] = store.records(run["id"])
        for (_, gpu), sides in sorted(legs.items()):
            out.append((f"{tarball.name.removesuffix('.tar.gz')} GPU {gpu}", sides["A"], sides["B"]))
    return out


def parts(study):
    return [json.loads(lzma.decompress((EVIDENCE / STUDIES[study] / f"power-gpu0-part{i}.json.xz").read_bytes()))
            for i in (1, 2)]


def by_order(samples, k, batch=8):
    """The medians of k placements whose accepted batches of ``batch`` samples rotated through them
    (harness.measurement.timing.CudaTimer), from the samples in the order they were taken."""
    return [round(statistics.median(s), 6) for s in
            ([x for j, x in enumerate(samples) if (j // batch) % k == g] for g in range(k))]


def with_placements_by_order(study_parts, checked_parts):
    """The 03:59 parts with the placement medians of their calls under 50 us read back from the sample order
    (5 placements a process then); first checked exact on every such record of the 12:20 study."""
    exact = total = 0
    for part in checked_parts:
        for name, timings in part["passes"].items():
            for t, recorded in zip(timings, part["placements"][name], strict=True):
                if t["median_ms"] < 0.05:
                    total += 1
                    exact += by_order(t["samples_ms"], len(recorded)) == recorded
    if exact != total:
        raise SystemExit(f"placements from sample order: {exact} of {total} exact, not all")
    short = {i for i, t in enumerate(study_parts[0]["passes"]["base"]) if t["median_ms"] < 0.05}
    out = []
    for part in study_parts:
        part = dict(part, placements={name: [by_order(t["samples_ms"], 5) if i in short else None
                                             for i, t in enumerate(timings)]
                                      for name, timings in part["passes"].items()})
        out.append(part)
    return out, total


def wide_pairs(pairs) -> dict[str, list[int]]:
    """Over A/A record pairs whose samples are only `wide` and that hold three placements a side or more, by
    processes a side: [pairs, placements apart, apart beyond the thresholds, apart by more than their spread,
    that and beyond the thresholds]: how often each rule could fire on no change, thresholds or not."""
    th = Thresholds()
    out = {"one process": [0] * 5, "two processes": [0] * 5}
    for a_recs, b_recs in pairs:
        a = {r.identity_key(): r for r in a_recs if r.status == "ok" and r.median_ms}
        b = {r.identity_key(): r for r in b_recs if r.status == "ok" and r.median_ms}
        for key in a.keys() & b.keys():
            base, head = a[key], b[key]
            if set(timechange.untrusted(base)) | set(timechange.untrusted(head)) != {"wide"}:
                continue
            sides = _sides(base, head, 3, False)
            if sides is None:
                continue
            ratio, rel = head.median_ms / base.median_ms, th.rel(base.median_ms)
            over = (ratio >= 1 + rel or ratio <= 1 / (1 + rel)) and abs(head.median_ms - base.median_ms) * 1e3 >= th.abs_us
            g, spread = timechange.placement_gap(*sides, ratio > 1)
            row = out["two processes" if _sides(base, head, 3, True) else "one process"]
            for i, hit in enumerate((True, g > 0, g > 0 and over, g > spread, g > spread and over)):
                row[i] += hit
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    try:
        floors = [float(a.split("=", 1)[1]) for a in args if a.startswith("floor=")] or [thresholds.ABS_FLOOR_US]
        for floor in floors:
            thresholds.checked(Thresholds(abs_us=floor))
    except (ValueError, UserError) as exc:
        print(f"gate_rules: floor=US takes microseconds the gate accepts ({exc})", file=sys.stderr)
        return 2
    names = [a for a in args if not a.startswith("floor=")] or list(RULES)
    unknown = [n for n in names if n not in RULES and n not in CLOSE_RULES and n not in MOVED_RULES]
    if unknown:
        print(f"gate_rules: unknown rule {', '.join(unknown)} (known: {', '.join([*RULES, *CLOSE_RULES, *MOVED_RULES])})",
              file=sys.stderr)
        return 2
    aa = aa_pairs()
    studies = {s: parts(s) for s in STUDIES}
    studies["03:59, placements by order"], checked = with_placements_by_order(studies["03:59"], studies["12:20"])
    print(f"placements read back from sample order: exact on all {checked} records under 50 us of the 12:20 study")
    nights = {}
    for name in NIGHTS:
        store = Store(":memory:")
        read_runs_into(store, [RUNS / f"{name}.tar.gz"])
        nights[name] = [store.records(r["id"]) for r in sorted(store.runs(), key=lambda r: r["started"])]
    nightly_runs = sorted(calibrate_gate.load([str(RUNS / "h200x2-repeat8-fwd.tar.gz")]))
    nights_pairs = [(r[i], r[j]) for r in nights.values() for i, j in itertools.combinations(range(len(r)), 2)]
    for processes, (n, apart, apart_over, beyond, beyond_over) in wide_pairs(
            [(a, b) for _, a, b in aa] + nights_pairs).items():
        print(f"only-wide A/A record pairs, {processes} a side: {n}; placements apart {apart} ({apart_over} beyond "
              f"the thresholds); apart by more than their spread {beyond} ({beyond_over} beyond the thresholds)")
    for name, floor in itertools.product(names, floors):
        timechange.placements_apart = RULES.get(name, CURRENT)
        timechange.placements_close = CLOSE_RULES.get(name, CLOSE)
        timechange.placements_moved = MOVED_RULES.get(name, MOVED)
        th = Thresholds(abs_us=floor)
        try:
            failing = {}
            for pair, a, b in aa:
                failing[pair] = sum(f.verdict in ("regression", "improvement")
                                    for f in judgement.judge(a, b, th)["findings"])
            power = {}
            for study, ps in studies.items():
                s = detection_power.judge(ps, th=th)["summary"]
                power[study] = (s["20-50us +10%"]["detected"], s["20-50us +10%"]["calls"],
                                s["50-infus +5%"]["detected"], s["50-infus +5%"]["calls"],
                                s["aa_false_alarms"]["regressions"] + s["aa_false_alarms"]["improvements"])
            night_pairs = {n: sum(bool(gate(compare_runs(r[i], r[j], th, r[max(0, i - 5):i]), th))
                                  for i, j in itertools.combinations(range(len(r)), 2)) for n, r in nights.items()}
            nightly = calibrate_gate.nightly_power(nightly_runs, th)
        finally:
            timechange.placements_apart, timechange.placements_close = CURRENT, CLOSE
            timechange.placements_moved = MOVED
        print(f"\n{name}, floor {floor:g} us: A/A failing {sum(failing.values())} "
              f"({', '.join(f'{p} {n}' for p, n in failing.items() if n)})")
        for study, (d10, n10, d5, n5, aa_alarms) in power.items():
            print(f"  {study}: +10 % on 20-50 us {d10}/{n10} ({d10 / n10:.1%}), +5 % on >= 50 us {d5}/{n5} "
                  f"({d5 / n5:.1%}), A/A pass {aa_alarms}")
        print(f"  nights: failing pairs {', '.join(f'{n} {k} of 28' for n, k in night_pairs.items())}; nightly power "
              f"+5 % {nightly['plus5'][1]}/{nightly['plus5'][0]} ({nightly['plus5'][1] / nightly['plus5'][0]:.1%}), "
              f"+10 % {nightly['plus10'][1]}/{nightly['plus10'][0]} ({nightly['plus10'][1] / nightly['plus10'][0]:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
