"""The gate's settings: how large a change in time, error or output must be before a comparison reports it, each
default beside the measurement behind it; checked in one place (``checked``) and read from a file (``load``).

``convbench compare``, ``report`` and ``upgrade`` take the same settings (their flags, a ``--gate-file`` TOML, or
``[tool.convbench.gate]`` in ./pyproject.toml), so a CI gate run with ``--time-threshold 1.10`` and the morning
page it is read beside judge alike, and the page says what it judged with (``settings_lines``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from .findings import FindingKind

# The gate's thresholds: how large a change in time, error or output must be before a comparison reports it.
#
# Every default sits beside the measurement that justified it (scripts/calibrate_gate.py, docs/performance.md):
# a threshold tighter than the noise between identical runs fails the gate on nothing, a looser one misses real
# regressions. ``Thresholds`` carries the user's overrides (``convbench compare --time-ratio`` ...).

# Relative time thresholds by the base call's median (upper edge in ms, threshold), chosen on the H200's A/A runs
# and injected slowdowns (scripts/calibrate_gate.py; docs/performance.md). With every combination timed
# in two processes: 97 % of +5 % slowdowns on calls >= 50 us and 91 % of +10 % on 20-50 us detected; A/A pairs failed
# on 0, 0, 1 and 2 findings (one PyTorch search, one kernel at 4.4 %); 5 % for >= 50 us would fail on none of them
# and detect 180 of 315 +5 %. Later that day (capped batches discarded, past_level): two A/A studies 0 and 0, and
# 0 of 28 pairs of eight nights of one stack with their history.
TIME_BANDS: tuple[tuple[float, float], ...] = ((0.020, 0.10), (0.050, 0.06), (math.inf, 0.04))
# Host-timed records (the CPU backends, timer perf_counter) share their cores with everything else on the host:
# one relative threshold and a floor of their own.
HOST_TIMER_REL, HOST_TIMER_ABS_US = 0.25, 20.0
# Absolute floor in microseconds: a change smaller than this is noise whatever its ratio (a 5 us call moving
# by 0.5 us is 10 %). Measured between hosts the per-call offset was 1.4 us (issue 13); on one H200, F.conv2d
# `layer4.1.conv1` bf16 NHWC settles per run at 11.1 or 12.4 us and failed a committed A/A pair at 1 us
# (docs/performance.md). 1.5 us changed no detection figure on the committed studies (scripts/gate_rules.py; 2 us
# lost 20 of 607 nightly +10 % detections).
ABS_FLOOR_US = 1.5
# What a user may set each threshold to: a number outside these switches the gate off in effect (an alpha of 1e-300
# no test reaches, a ratio of 1e300 no slowdown reaches) or fails it on noise, so it is a usage error.
ALPHA_BOUNDS = (1e-6, 0.2)  # closed
TIME_RATIO_MAX = 10.0  # (1, 10]: a 10x slowdown is the largest worth waiting for
ABS_US_MAX = 10_000.0  # [0, 10 ms]: a floor above the slowest conv call hides them all
ERROR_GROWTH_MAX = 1000.0  # (1, 1000]: three decades of error growth is a broken result, not a tolerance


def bounds_problem(time_ratio: float | None, alpha: float, error_growth: float, abs_us: float) -> str | None:
    """Why these thresholds would make the gate meaningless (one line), or None where they are within bounds."""
    lo, hi = ALPHA_BOUNDS
    checks = (("--time-threshold", time_ratio, lambda v: 1.0 < v <= TIME_RATIO_MAX, f"in (1, {TIME_RATIO_MAX:g}]"),
              ("--alpha", alpha, lambda v: lo <= v <= hi, f"in [{lo:g}, {hi:g}]"),
              ("--error-growth", error_growth, lambda v: 1.0 < v <= ERROR_GROWTH_MAX, f"in (1, {ERROR_GROWTH_MAX:g}]"),
              ("--abs-us", abs_us, lambda v: 0.0 <= v <= ABS_US_MAX, f"in [0, {ABS_US_MAX:g}]"))
    for flag, value, ok, bound in checks:
        if value is not None and not (math.isfinite(value) and ok(value)):
            return f"{flag} {value:g} is outside {bound[3:]}: beyond it the gate would pass or fail on nothing"
    return None


@dataclass
class Thresholds:
    time_ratio: float | None = None  # one relative threshold for every call (head/base); None: TIME_BANDS
    abs_us: float = ABS_FLOOR_US  # absolute floor of a time finding
    alpha: float = 0.01  # one-sided Mann-Whitney U level
    error_growth: float = 4.0  # head max_norm_err / base max_norm_err at or above which accuracy regressed
    # normalised errors below one fp32 unit roundoff (2^-24) are treated as equal: both are exact to the reference
    # as far as any stored format can tell, so an error from 0 to 1e-8 is not a regression (issue 19)
    error_floor: float = 2.0 ** -24
    bitwise: bool = False  # count "outputs no longer bitwise equal" as a regression, not only a change
    ignore: tuple[str, ...] = ()  # kinds that never fail the gate
    across_hardware: bool = False  # gate a comparison of two different machines (default: report only)
    # a combination ok in the base and not measured in the head is coverage lost: a regression unless the gate
    # allows it (--allow-lost-coverage or the file's allow_lost_coverage), the same in compare, report and upgrade
    lost_coverage_fails: bool = True

    def rel(self, base_ms: float, timer: str | None = None) -> float:
        """The relative threshold for a call of this median: the user's, or the calibrated band's."""
        if self.time_ratio is not None:
            return self.time_ratio - 1.0
        if timer == "perf_counter":
            return HOST_TIMER_REL
        return next(t for edge, t in TIME_BANDS if base_ms < edge)

    def floor_us(self, timer: str | None = None) -> float:
        return max(self.abs_us, HOST_TIMER_ABS_US) if timer == "perf_counter" else self.abs_us


# What a gate file (or [tool.convbench.gate]) may hold: each key is a compare flag's name, with _ or -
FILE_KEYS = ("time_threshold", "abs_us", "alpha", "error_growth", "bitwise", "ignore", "across_hardware",
             "allow_lost_coverage")
PYPROJECT = Path("pyproject.toml")  # read from the working directory, as ruff and pytest read theirs


def checked(th: Thresholds) -> Thresholds:
    """``th`` if every setting is meaningful, else a UserError (exit 2) saying which is not and why: the one check
    of the gate's settings, whichever command or file they came from."""
    problem = bounds_problem(th.time_ratio, th.alpha, th.error_growth, th.abs_us)
    if problem:
        raise UserError(problem)
    unknown = [k for k in th.ignore if k not in FindingKind.values()]
    if unknown:
        raise UserError(f"ignore {unknown[0]!r} is not a kind of finding ({', '.join(FindingKind.values())})")
    return th


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"gate file {path}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"gate file {path}: not TOML ({str(exc).splitlines()[0]})") from None


def file_settings(gate_file: Path | None) -> dict[str, Any]:
    """The settings a gate file holds (its top level, or its [tool.convbench.gate] table), or, without one,
    ./pyproject.toml's [tool.convbench.gate] where there is one: keys as FILE_KEYS spells them."""
    path = gate_file if gate_file is not None else PYPROJECT
    if gate_file is None and not path.is_file():
        return {}
    doc = _toml(path)
    table = doc.get("tool", {}).get("convbench", {}).get("gate") if isinstance(doc.get("tool"), dict) else None
    if table is None:
        table = {} if gate_file is None else doc
    if not isinstance(table, dict):
        raise UserError(f"gate file {path}: [tool.convbench.gate] is not a table")
    out = {}
    for key, value in table.items():
        name = str(key).replace("-", "_")
        if name not in FILE_KEYS:
            raise UserError(f"gate file {path}: {key!r} is not a gate setting ({', '.join(FILE_KEYS)})")
        want = {"bitwise": bool, "across_hardware": bool, "allow_lost_coverage": bool, "ignore": list}.get(name)
        if want is not None and not isinstance(value, want):
            raise UserError(f"gate file {path}: {key} must be {'true or false' if want is bool else 'a list'}")
        if want is None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UserError(f"gate file {path}: {key} must be a number")
        out[name] = value
    return out


def load(gate_file: Path | None = None, *, lost_coverage_fails: bool = True, **flags: Any) -> Thresholds:
    """The gate's settings: the defaults, then the file's (``file_settings``), then the flags given (None or
    absent: not given), checked. Lost coverage fails unless the file's or the flag's ``allow_lost_coverage``
    (or ``lost_coverage_fails=False``) allows it."""
    given = {**file_settings(gate_file), **{k: v for k, v in flags.items() if v is not None}}
    unknown = set(given) - set(FILE_KEYS)
    if unknown:
        raise TypeError(f"not a gate setting: {sorted(unknown)}")
    th = Thresholds(time_ratio=given.get("time_threshold"), abs_us=float(given.get("abs_us", ABS_FLOOR_US)),
                    alpha=float(given.get("alpha", 0.01)), error_growth=float(given.get("error_growth", 4.0)),
                    bitwise=bool(given.get("bitwise", False)), ignore=tuple(given.get("ignore", ())),
                    across_hardware=bool(given.get("across_hardware", False)),
                    lost_coverage_fails=lost_coverage_fails and not given.get("allow_lost_coverage", False))
    if th.time_ratio is not None:
        th.time_ratio = float(th.time_ratio)
    return checked(th)


def settings_lines(th: Thresholds) -> list[str]:
    """The settings in a reader's words, for the page that was judged with them."""
    time = (f"one time threshold x{th.time_ratio:g} for every call" if th.time_ratio is not None else
            "time thresholds by call length " + ", ".join(
                f"+{t:.0%} below {edge * 1e3:g} us" if math.isfinite(edge) else f"+{t:.0%} above"
                for edge, t in TIME_BANDS))
    return [f"{time}; absolute floor {th.abs_us:g} us; Mann-Whitney alpha {th.alpha:g}",
            f"accuracy: max normalised error growth x{th.error_growth:g}; changed output bits "
            + ("fail" if th.bitwise else "are changes"),
            "ignored kinds: " + (", ".join(th.ignore) if th.ignore else "none")
            + ("; regressions across hardware fail" if th.across_hardware else "")
            + ("; coverage lost (ok before, not measured now) " + ("fails" if th.lost_coverage_fails else "allowed"))]


def as_dict(th: Thresholds) -> dict[str, Any]:
    return dataclasses.asdict(th)
