"""The record: one measured combination, the unit everything else in convbench reads and writes.

One class for writers and readers alike: a backend yields a ``Record``, the journal writes it as one JSON object
(``to_dict``), and the store and a run read back from its directory return ``Record`` objects again
(collect/store_reads.py), which compare, the report and the upgrade study read. Keys that a backend cannot fill
stay ``None`` rather than being left out, so that a reader never has to guess whether a value was lost or never
measured.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Sequence
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


# A record read back (Store.records, runread) holds what the store kept, in the same classes: a part (time,
# accuracy, determinism) is there where any of its stored columns is, and a field the store keeps no column for
# (Accuracy.reduction) or that its line left out (asv's metrics, a line written by hand) is None, whatever its type
# says; the timer's clock, flags and host time, kept in the store's extra column, are back in Timing.


@dataclass(slots=True)
class Timing:
    """Summary of device-timed samples; ``samples_ms`` is kept so regressions can be tested statistically."""

    median_ms: float
    iqr_ms: float
    n: int
    mode: str  # "hot" or "cold" (L2 flushed before each repetition)
    timer: str  # "cuda_event" or "perf_counter" (host clock, CPU backends)
    min_ms: float | None = None
    # a list as a backend measures them and a journal line holds them (schema.JOURNAL_TYPES); read back, a float64
    # numpy array (core imports no numpy: a sequence of floats), None where the reader asked for no samples
    samples_ms: Sequence[float] | None = field(default_factory=list)
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


@dataclass(slots=True)
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


@dataclass(slots=True)
class Determinism:
    """Bitwise reproducibility of one output; ``hash`` is comparable across processes and machines."""

    hash: str
    hash_algo: str
    # how many repeats on the same operands were compared with the first output (cuDNN: on its placements)
    repeats: int
    repeat_equal: bool | None  # all repeats bitwise equal to the first output
    # a run with a freshly created handle/session bitwise equal (cuDNN timed in two processes: the replica's run)
    fresh_handle_equal: bool | None
    distinct_outputs: int = 1


# Record fields a reader of the store gets and a journal never holds (to_dict, from_dict and the schema leave them
# out): what the store knows of a record, not what was measured.
READ_BACK_FIELDS = ("combo", "combo_key", "run")


@dataclass(slots=True)
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
    # READ_BACK_FIELDS, None on a record a backend yields: its combination's id in the store (in a run read
    # without a store, its place among the run's combinations) and the store's key of it (identity.key())
    combo: int | None = field(default=None, compare=False, repr=False)
    combo_key: str | None = field(default=None, compare=False, repr=False)
    # the run row (Store.runs) it was read from, where a reader that reads several runs keeps it (the report)
    run: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def key(self) -> str:
        """The key of the combination, whatever the record's kind (a study's record and the measurement it is of
        share it); stable across runs so they can be compared. ``identity.key()`` tells the kinds apart."""
        return record_key(self.case, self.backend, self.direction, self.algo, self.math, self.dtype, self.layout,
                          self.settings)

    def identity_key(self) -> str:
        """``identity.key()``, the store's key of the combination with its kind: what two runs' records are
        matched on. Read back, the key the store keeps (``combo_key``), not spelled again."""
        return self.combo_key if self.combo_key is not None else self.identity.key()

    @property
    def identity(self) -> Identity:
        return Identity(self.case, self.backend, self.direction, self.algo, self.math, self.dtype, self.layout,
                        self.settings, self.kind)

    @property
    def listed_settings(self) -> dict[str, Any]:
        """The settings as a record is listed (pages, findings): a study's kind shown among them as ``record``."""
        return self.settings if self.kind == RecordKind.MEASUREMENT else {"record": self.kind, **self.settings}

    # Read-only views of the values most readers ask for, None where the part is missing.
    @property
    def median_ms(self) -> float | None:
        return None if self.time is None else self.time.median_ms

    @property
    def samples(self) -> Sequence[float] | None:
        return None if self.time is None else self.time.samples_ms

    @property
    def precision_class(self) -> str | None:
        return None if self.accuracy is None else self.accuracy.precision_class

    @property
    def max_norm_err(self) -> float | None:
        return None if self.accuracy is None else self.accuracy.max_norm_err

    @property
    def hash(self) -> str | None:
        return None if self.determinism is None else self.determinism.hash

    def to_dict(self) -> dict[str, Any]:
        """The journal's JSON object of the record (no READ_BACK_FIELDS)."""
        data = dataclasses.asdict(self)
        for name in READ_BACK_FIELDS:
            del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        if not isinstance(data, dict):
            raise ValueError("record is not a JSON object")
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"record schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        names = {f.name for f in dataclasses.fields(cls)} - set(READ_BACK_FIELDS)
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
