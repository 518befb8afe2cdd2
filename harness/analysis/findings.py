"""The vocabulary of a comparison's findings: their kinds and verdicts as enums, and the Finding itself.

A finding says what it is in fields, never only in its words: the paired judgement, the report and the gate
read ``kind``, ``bits`` and ``expected`` instead of searching the evidence text.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class FindingKind(enum.StrEnum):
    """What changed between two runs' records of one combination."""

    TIME = "time"
    ACCURACY = "accuracy"
    DETERMINISM = "determinism"  # reproducibility within a run, and output bits across runs (Finding.bits)
    AVAILABILITY = "availability"  # status: runs, fails, not measured
    SEARCH = "search"  # an autotuner's choice

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(k.value for k in cls)


class Verdict(enum.StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    CHANGE = "change"
    AMBIGUOUS = "ambiguous"


KINDS = FindingKind.values()
VERDICT_WORDS = {FindingKind.TIME: {Verdict.REGRESSION: "slower", Verdict.IMPROVEMENT: "faster"}}
# The kinds whose finding may quote the record's own explanation (core/explain.py: its status and accuracy); a
# time finding's cause is why.time_cause's, a determinism finding's the documented cause in its evidence.
EXPLAINED_BY_RECORD = (FindingKind.ACCURACY, FindingKind.AVAILABILITY)
# The words of a determinism-kind finding whose output differs from the other side's (two stacks, two nights):
# "determinism" is kept for reproducibility within one run, this for output bits across runs.
BITS_CHANGED = "output bits changed vs base"


@dataclass
class Finding:
    kind: FindingKind
    verdict: str  # a Verdict: regression, improvement, change, ambiguous
    key: str
    case: str
    backend: str
    direction: str
    algo: str
    math: str
    dtype: str
    layout: str
    settings: dict[str, Any]
    base: str  # the base value, in words
    head: str
    evidence: str  # why, with numbers
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    p: float | None = None
    base_run: str = ""
    head_run: str = ""
    machine: str = ""
    explanation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    delta_us: float | None = None  # head - base median, for time findings: the absolute size beside the ratio
    base_ms: float | None = None  # the medians as numbers (base and head above are words), for time findings
    head_ms: float | None = None
    bits: bool = False  # the output-bits finding (BITS_CHANGED), not one of reproducibility within a run
    expected: str | None = None  # the documented cause that makes this change expected (a non-deterministic algo)

    @property
    def words(self) -> str:
        """The verdict in a reader's words: slower / faster for time, else the verdict itself."""
        return VERDICT_WORDS.get(self.kind, {}).get(self.verdict, self.verdict)

    @property
    def judged_kind(self) -> str:
        """The kind an upgrade's judgement counts: output bits apart from determinism flags, and bits that a
        documented non-deterministic algorithm changed by chance ("expected bits") apart from bits a stack
        changed."""
        if self.bits:
            return "expected bits" if self.expected else "bits"
        return str(self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "words": self.words}
