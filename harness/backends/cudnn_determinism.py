"""The determinism check of one cuDNN combination: repeats compared bit for bit with the checked run's output,
then, in a run timed in one process, one run on a fresh handle.

The repeats go round the placements the process then times (cudnn.ConvSession.placed), from the second: each
placement's first call is a repeat, not an untimed warm-up of the timer (a placement's first call ran up to a
quarter slower than its next, docs/performance.md), and every repeat is timed, for the timer's batch and spacer.
A placement holds copies of the same operands, so a deterministic algorithm gives the same bits on each.

A run timed in two processes (run/replicas.py) runs no fresh handle here: the replica's checked run is a handle of
its own in a process of its own, and ``replicas.merge`` compares its hash with this one (``fresh_handle_equal``).
The call it saves was about one in fourteen of a long backward call's calls.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.records import Determinism
from ..measurement import accuracy
from .cudnn_lib import Conv, fresh_handle

# Algorithms documented as non-deterministic are repeated up to NONDETERMINISTIC_REPEATS times. Past
# NONDETERMINISTIC_MIN_REPEATS they stop once the instability has shown (the finding is made), and from
# NONDETERMINISTIC_LONG_MIN_REPEATS on once the next repeat would take them past NONDETERMINISTIC_BUDGET_S (a call of
# 8.3 ms or more runs 2 repeats, 2.5 ms 10, under 1.25 ms all 20). On the H200 every documented algorithm slower than
# 5.2 ms was bitwise stable (686 of 714 unstable ones gave 22 outputs in 22 runs, 711 of 713 stopped at 6 repeats,
# the fresh-process replay found no other; docs/history.md). In one backward sweep 709 were unstable, the slowest a
# 5.1 ms call; 704 showed it on every repeat and the 5 that needed 10-19 repeats were 0.40 ms calls, which still run
# all 20 within the budget. Repeats of stable calls took about 29 s of that sweep at a budget of 0.075 s and 17 s at
# this one (worked out from its records). The record carries the count it ran.
NONDETERMINISTIC_REPEATS = 20
NONDETERMINISTIC_MIN_REPEATS = 6
NONDETERMINISTIC_LONG_MIN_REPEATS = 2
NONDETERMINISTIC_BUDGET_S = 0.025


def runs_fresh_handle(options: Any) -> bool:
    """Whether this process runs the fresh-handle check: in a run of one process only (the module's docstring)."""
    return options.processes <= 1


def check(session: Any, algo_id: int, ws: int, ws_bytes: int, placed: list[tuple[Any, Any]],
          documented: bool) -> tuple[Determinism, list[tuple[float, float]]]:
    """The determinism of the bound call whose checked output ``session.first`` holds, and the repeats'
    (host seconds, device ms); ``placed`` is the (call, output) of each placement the process times."""
    torch, stream, dtype, first = session.torch, session.stream, session.dtype, session.first
    first_hash = accuracy.output_hash(first)
    hashes = {first_hash}
    repeat_equal = True
    options = session.options
    # Algorithms documented as non-deterministic are repeated enough to show it where it happens.
    repeats = max(options.repeats, NONDETERMINISTIC_REPEATS) if documented else options.repeats
    floor = max(options.repeats, NONDETERMINISTIC_MIN_REPEATS)
    long_floor = max(options.repeats, NONDETERMINISTIC_LONG_MIN_REPEATS)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    seen: list[tuple[float, float]] = []
    t0, done = time.perf_counter(), 0
    while done < repeats:
        call, out = placed[(done + 1) % len(placed)]
        accuracy.poison(out, dtype)
        start.record(stream)
        h = time.perf_counter()
        call()
        host = time.perf_counter() - h
        end.record(stream)
        done += 1
        if not accuracy.bitwise_equal(out, first):
            repeat_equal = False
            hashes.add(accuracy.output_hash(out))
        end.synchronize()
        seen.append((host, start.elapsed_time(end)))
        # Past the floor a documented algorithm stops once it has shown itself unstable (the finding is made;
        # more repeats only count more distinct outputs); past the long calls' floor, once one more repeat
        # would overrun the budget.
        spent = time.perf_counter() - t0
        if documented and ((done >= floor and not repeat_equal) or
                           (done >= long_floor and spent * (done + 1) / done > NONDETERMINISTIC_BUDGET_S)):
            break
    fresh_equal = None
    if runs_fresh_handle(options):
        fresh_equal = _fresh_handle_equal(session, algo_id, ws, ws_bytes)
        if not fresh_equal:
            hashes.add(accuracy.output_hash(session.out))
    return Determinism(hash=first_hash, hash_algo=accuracy.HASH_ALGO, repeats=done, repeat_equal=repeat_equal,
                       fresh_handle_equal=fresh_equal, distinct_outputs=len(hashes)), seen


def _fresh_handle_equal(session: Any, algo_id: int, ws: int, ws_bytes: int) -> bool:
    """Whether one run on a handle that has run nothing gives the checked run's bits (left in ``session.out``)."""
    stream, dtype = session.stream, session.dtype
    fresh = fresh_handle(session.cudnn, stream.cuda_stream)
    try:
        fresh_conv = Conv(session.cudnn, fresh, session.desc, session.direction, session.ptrs)
        accuracy.poison(session.out, dtype)
        fresh_conv.run(algo_id, ws, ws_bytes)
        return accuracy.bitwise_equal(session.out, session.first)
    finally:
        stream.synchronize()
        fresh.close()
