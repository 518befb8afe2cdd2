"""The record: one measured combination, the unit everything else in convbench reads and writes.

A record is a flat JSON object so that the journal, the asv bridge, the store and the report all agree on
one shape. Keys that a backend cannot fill stay ``None`` rather than being left out, so that a reader never
has to guess whether a value was lost or never measured.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

# Statuses that are not cuDNN's own. cuDNN statuses are kept verbatim (e.g. "CUDNN_STATUS_NOT_SUPPORTED").
OK = "ok"
SKIPPED = "skipped"  # the combination cannot run on this host (no GPU, no library); reason says why
WORKSPACE_TOO_LARGE = "workspace_too_large"
UNSUPPORTED_ARCH = "unsupported_arch"  # e.g. TF32 or BF16 asked for on a GPU older than the feature
ERROR = "error"  # an exception the backend did not expect; reason holds it
CRASHED = "crashed"  # the worker died (signal) while running this combination
TIMEOUT = "timeout"  # the watchdog ended the worker
OOM = "out_of_memory"
FAILED = (ERROR, CRASHED, TIMEOUT, OOM)  # the statuses that mean a combination should have run and did not


def wholly_failed(pairs) -> list[str]:
    """Groups (e.g. backends) whose every record failed, from (group, status) pairs; a skipped or n/a record is
    not a failure. A command whose backend never produced a single result must not exit 0."""
    seen: dict[str, bool] = {}
    for group, status in pairs:
        seen[group] = seen.get(group, True) and status in FAILED
    return sorted(g for g, all_failed in seen.items() if all_failed)


class RecordKind(enum.StrEnum):
    """What a journal line is: a measured combination, or a study's record of it, or cuDNN's own ranking."""

    MEASUREMENT = "measurement"
    AUTOTUNE = "autotune"  # an autotuner's winners over fresh searches (run/autotune.py)
    CROSSCHECK = "crosscheck"  # a framework's call against cuDNN's FMA math (run/autotune.py)
    REPRO = "repro"  # a fresh-process recomputation of a run's outputs (run/repro.py)
    RANKING = "ranking"  # one row of cuDNN's Find / Get_v7 (Ranking)


RECORD_KINDS = tuple(k for k in RecordKind if k is not RecordKind.RANKING)  # the kinds of Record (not Ranking)

# What a key is made of: the seven identity fields joined by KEY_SEPARATOR, then the settings as ``k=v`` joined
# by SETTING_SEPARATOR, then, for a record of another kind than a measurement, ``|kind=`` and its kind. The record
# schema refuses a KEY_SEPARATOR in every field, and in a setting's name any of the three, so a key splits back
# into exactly one identity: keys are injective (tests/test_records.py proves it).
KEY_SEPARATOR, SETTING_SEPARATOR, SETTING_EQUALS = "|", ",", "="
IDENTITY_FIELDS = ("case", "backend", "direction", "algo", "math", "dtype", "layout")


def record_key(case: str, backend: str, direction: str, algo: str, math: str, dtype: str, layout: str,
               settings: dict[str, Any], kind: str = RecordKind.MEASUREMENT) -> str:
    """The key of one combination: its seven identity fields and its settings (sorted ``k=v``), joined by ``|``;
    ``|kind=K`` after them for a record of another kind than a measurement, so that an autotune, crosscheck or
    repro record of a combination never takes its measurement's place.

    The one spelling of a record's key: ``Identity.key()``, ``Record.key()`` (its combination, whatever its
    kind: what resume and replicas match), collect's parsers (which build no Record per line), the store's combos
    and compare's machine-neutral key all use it, so a key written anywhere matches everywhere.
    """
    key = "|".join((case, backend, direction, algo, math, dtype, layout, settings_key(settings)))
    return key if kind == RecordKind.MEASUREMENT else f"{key}|kind={kind}"


@dataclass(frozen=True)
class Identity:
    """Which combination a record is of: what stays the same from night to night, machine to machine."""

    case: str
    backend: str
    direction: str
    algo: str
    math: str
    dtype: str
    layout: str
    settings: dict[str, Any] = field(default_factory=dict, hash=False)
    kind: str = RecordKind.MEASUREMENT

    def key(self) -> str:
        """The store's key of this combination (record_key with the kind)."""
        return record_key(self.case, self.backend, self.direction, self.algo, self.math, self.dtype, self.layout,
                          self.settings, self.kind)


def settings_key(settings: dict[str, Any], omit: tuple[str, ...] = ()) -> str:
    """A record's settings as they appear in its key: ``k=v`` sorted by name, joined by commas; ``omit`` leaves
    out settings that only name where it ran (``device``) when lining up the same combination across hosts.

    A value is spelled as its text (1 and "1" are one setting). Journals refuse a comma in a value; asv results
    may hold one (convbench's own suite names a setting ``heuristic,tf32=0,ws=0``), so a value holding a comma or
    starting with a double quote is written as a JSON string: self-delimiting, and no other value is spelled so."""
    return ",".join(f"{k}={_setting_text(v)}" for k, v in sorted(settings.items()) if k not in omit)


def _setting_text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if "," in text or text.startswith('"') else text


@dataclass
class Timing:
    """Summary of device-timed samples; ``samples_ms`` is kept so regressions can be tested statistically."""

    median_ms: float
    iqr_ms: float
    n: int
    mode: str  # "hot" or "cold" (L2 flushed before each repetition)
    timer: str  # "cuda_event" or "perf_counter" (host clock, CPU backends)
    min_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    # the GPU's clock while sampling (harness.measurement.clocks.during): SM MHz range and slowdown reasons such as a
    # power cap over the batches kept, and "throttled_batches": batches discarded because a cap held the clock down
    clock: dict[str, Any] | None = None
    # host time to enqueue one call (median, ms): the legacy cuDNN API's dispatch cost is real cost, kept apart
    host_ms: float | None = None
    # what the samples themselves say against trusting the median (measure.sample_flags): "host_bound",
    # "multimodal", "wide", "few_samples", and "throttled" (timed under a clock cap that never lifted); a compare
    # calls a change on such a record ambiguous instead of slower/faster (only-"wide" samples timed in two
    # processes a side are judged on their placements: analysis.timechange.placements_apart)
    flags: list[str] = field(default_factory=list)


@dataclass
class Accuracy:
    """Error of one output against the float64 reference computed from the same rounded inputs."""

    max_abs: float
    rel_l2: float
    max_norm_err: float  # max |y - ref| / (|x| conv |w|), the scale a dot-product error bound uses
    nan: int
    inf: int
    unwritten: int  # elements still holding the NaN poison written before the run
    precision_class: str  # fp32 / tf32 / fp16 / bf16 / broken
    reduction: int | None = None  # terms summed per output element; the fp32 class edge depends on it


@dataclass
class Determinism:
    """Bitwise reproducibility of one output; ``hash`` is comparable across processes and machines."""

    hash: str
    hash_algo: str
    repeats: int  # how many in-place repeats were compared with the first output
    repeat_equal: bool | None  # all in-place repeats bitwise equal
    fresh_handle_equal: bool | None  # a run with a freshly created handle/session bitwise equal
    distinct_outputs: int = 1


@dataclass
class Record:
    case: str
    backend: str  # cudnn, torch, ort
    direction: str  # fwd, bwd_data, bwd_filter
    algo: str  # cuDNN enum name; "auto" where the framework chooses
    math: str  # cuDNN math type, or the framework's name for the setting
    dtype: str
    layout: str
    status: str = OK
    reason: str | None = None
    device: str = "cpu"
    settings: dict[str, Any] = field(default_factory=dict)  # e.g. {"tf32": true, "benchmark": false}
    workspace_bytes: int | None = None
    time: Timing | None = None
    accuracy: Accuracy | None = None
    determinism: Determinism | None = None
    chosen_algo: str | None = None  # what a framework/autotuner actually ran, where it can be observed
    explanation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    kind: str = RecordKind.MEASUREMENT
    schema: int = SCHEMA_VERSION

    def key(self) -> str:
        """The key of the combination, whatever the record's kind (a study's record and the measurement it is of
        share it); stable across runs so they can be compared. ``identity.key()`` tells the kinds apart."""
        return record_key(self.case, self.backend, self.direction, self.algo, self.math, self.dtype, self.layout,
                          self.settings)

    @property
    def identity(self) -> Identity:
        return Identity(self.case, self.backend, self.direction, self.algo, self.math, self.dtype, self.layout,
                        self.settings, self.kind)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        if not isinstance(data, dict):
            raise ValueError("record is not a JSON object")
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"record schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"record has unknown fields: {sorted(unknown)}")
        values = dict(data)
        for name, sub in (("time", Timing), ("accuracy", Accuracy), ("determinism", Determinism)):
            if values.get(name) is not None:
                values[name] = sub(**values[name])
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"record is missing fields: {exc}") from None


@dataclass
class Ranking:
    """cuDNN's own view of a case: one row of cudnnFind*/cudnnGet*_v7 output, kept as cuDNN reports it."""

    case: str
    direction: str
    dtype: str
    layout: str
    math: str  # the math type set on the descriptor when asking
    source: str  # "find" or "get_v7"
    rank: int
    algo: str
    status: str
    time_ms: float | None
    memory_bytes: int | None
    determinism: str  # DETERMINISTIC / NON_DETERMINISTIC
    math_reported: str
    kind: str = RecordKind.RANKING
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity; measured NaN (e.g. an error metric of a broken output) is stored as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def dumps(obj: Record | Ranking | dict[str, Any]) -> str:
    data = obj if isinstance(obj, dict) else obj.to_dict()
    return json.dumps(_finite(data), sort_keys=True, allow_nan=False)
