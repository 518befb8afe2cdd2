"""The asv results parser: an asv results file (api version 2), with its machine.json and benchmarks.json, as
a run for the store: one record per benchmark x parameter combination.

convbench's own suite reports its CUDA-event time next to per-combination metrics (error, bitwise stability);
those join the time's record instead of becoming records of their own. Parameter names come from
benchmarks.json, or are inferred from the values when it is missing. Anything of the wrong type or too large is
refused with the file's origin.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from typing import Any

import numpy as np

from ..core import intake
from ..core.cases import DTYPES, LAYOUTS, MATHS
from ..core.records import OK, RecordKind
from ..core.schema import MAX_TEXT, SchemaError, check_setting
from .discovery import AsvFile, Refused, sha1_16
from .rows import combo_row, night
from .store_packing import ParsedRun, samples_blob

ASV_RESULTS_VERSION = 2

_RECORD_FIELDS = ("case", "backend", "direction", "algo", "math", "dtype", "layout")
# convbench's own suite reports its CUDA-event time (time_conv: asv's samples are the record's; track_time in
# results written before) next to two per-combination metrics; those metrics join the time's record (accuracy,
# determinism) instead of becoming records of their own.
_ASV_TIME_TRACKS = ("track_time", "time_conv")
_ASV_JOINED = ("track_rel_l2_error", "track_bitwise_stable")
_CASE_ID = re.compile(r"^[a-z][a-z0-9_]*\.[A-Za-z0-9_.]+$")
_SETTING = re.compile(r"^\w+=\w+(,\w+=\w+)*$|^cpu$")
_ALGO = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DIRECTION_OF_CLASS = (("BackwardData", "bwd_data"), ("BackwardFilter", "bwd_filter"), ("Forward", "fwd"))


def _asv_unit(name: str, bench: dict[str, Any]) -> str | None:
    """The benchmark's unit: benchmarks.json's when present, else seconds for time benchmarks, else unknown."""
    if bench.get("unit"):
        return bench["unit"]
    method = name.rsplit(".", 1)[-1]
    return "seconds" if method.startswith("time_") or method in _ASV_TIME_TRACKS else None


def _infer_param_name(values: list[Any]) -> str | None:
    """A parameter's name from its values, for results without benchmarks.json (asv keeps the names there)."""
    vals = [v for v in values if isinstance(v, str)]
    if not vals or len(vals) != len(values):
        return None
    s = set(vals)
    for name, vocabulary in (("dtype", DTYPES), ("layout", LAYOUTS), ("math", MATHS)):
        if s <= set(vocabulary):
            return name
    if all(_CASE_ID.match(v) for v in vals):
        return "case"
    if all(_SETTING.match(v) for v in vals):
        return "setting"
    if all(_ALGO.match(v) for v in vals):
        return "algo"
    return None


def _param_names(bench: dict[str, Any], params: list[list[Any]]) -> tuple[list[str], bool]:
    """(names, inferred): benchmarks.json's names, else names inferred from the values (else paramN)."""
    if bench.get("param_names"):
        return list(bench["param_names"]), False
    names: list[str] = []
    for i, values in enumerate(params):
        n = _infer_param_name([v.strip("'\"") if isinstance(v, str) else v for v in values])
        names.append(n if n and n not in names else f"param{i + 1}")
    return names, True


def _asv_status(value: Any) -> str:
    if value is None:
        return "failed"
    if isinstance(value, float) and value != value:
        return "skipped"
    return OK


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


MAX_ASV_COMBOS = 100_000  # parameter combinations of one asv results file (300^4 fits in 10 KiB of JSON)


def _asv_product(origin: str, name: str, params: Any) -> int:
    """How many combinations a benchmark's parameters make, refused before any is built."""
    if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
        raise Refused(f"{origin}: asv result {name[:80]!r}: 'params' is not a list of lists")
    n = 1
    for p in params:
        n *= max(1, len(p))
        if n > MAX_ASV_COMBOS:
            raise Refused(f"{origin}: asv result {name[:80]!r}: its parameters make over {MAX_ASV_COMBOS} "
                          "combinations")
    return n


def _check_asv_row(origin: str, name: str, row: dict[str, Any], bench: Any, total: int) -> None:
    """Types of one asv result row: numbers (or null/NaN) where asv writes numbers, scalars as parameters."""
    where = f"{origin}: asv result {name[:80]!r}"
    if total > MAX_ASV_COMBOS:
        raise Refused(f"{where}: the file's results make over {MAX_ASV_COMBOS} combinations")
    if not isinstance(bench, dict):
        raise Refused(f"{where}: its benchmarks.json entry is not an object")
    for p in row.get("params") or []:
        for v in p:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool) or (isinstance(v, str) and len(v) > 1024):
                raise Refused(f"{where}: a parameter value is not short text or a number")
    def numbers(value: Any, key: str, depth: int = 0) -> None:
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and (value != value or abs(value) < 1e300)):
            return
        if isinstance(value, list) and depth < 2 and len(value) <= MAX_ASV_COMBOS:
            for v in value:
                numbers(v, key, depth + 1)
            return
        raise Refused(f"{where}: field {key!r} holds {type(value).__name__} where asv writes numbers")
    for key in ("result", "samples", "stats_q_25", "stats_q_75"):
        numbers(row.get(key), key)


def _check_identity(where: str, vals: tuple[str, ...], settings: dict[str, Any], seen: set) -> None:
    """A combination's identity under the rules a journal record's meets (core.schema): fields without ``|`` or
    control characters and at most MAX_TEXT long, settings named without ``|``, ``,`` or ``=`` (a value may hold a
    comma: settings_key quotes it), so that two combinations never share a key."""
    sig = (vals, tuple(sorted((k, v, v.__class__) for k, v in settings.items())))
    if sig in seen:
        return
    for field, v in zip(_RECORD_FIELDS, vals, strict=True):
        if not v or len(v) > MAX_TEXT or intake.has_control(v) or "|" in v:
            raise Refused(f"{where}: {field} {v[:60]!r} is empty, longer than {MAX_TEXT} characters or holds '|' "
                          "or control characters")
    try:
        for k, v in settings.items():
            check_setting(k, v, f"parameter {k[:40]!r}", value_commas=True)
    except SchemaError as exc:
        raise Refused(f"{where}: {exc}") from None
    if len(seen) < 200_000:
        seen.add(sig)


def _check_times(where: str, values: list[Any], q25: list[Any], q75: list[Any], samples: list[Any]) -> None:
    """What a journal refuses in a time (core.schema): a negative median or sample, an inverted spread."""
    for i, v in enumerate(values):
        lo, hi = (q25[i] if i < len(q25) else None), (q75[i] if i < len(q75) else None)
        if isinstance(v, (int, float)) and v < 0:
            raise Refused(f"{where}: a time is negative ({v})")
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and (lo < 0 or hi < lo):
            raise Refused(f"{where}: a time's quartiles are negative or inverted ({lo}, {hi})")
        sm = samples[i] if i < len(samples) else None
        if isinstance(sm, list) and any(isinstance(x, (int, float)) and x < 0 for x in sm):
            raise Refused(f"{where}: a sample time is negative")


def parse_asv(f: AsvFile) -> ParsedRun:
    """An asv results file (api version 2) as a run: one record per benchmark x parameter combination (a time
    and the per-combination metrics of the same class and parameters in one record)."""
    try:
        d = json.loads(f.data)  # asv writes NaN for skipped results, which only the stdlib parser accepts
        machine = json.loads(f.machine_json) if f.machine_json else {}
        benchmarks = json.loads(f.benchmarks_json) if f.benchmarks_json else {}
    except (ValueError, RecursionError) as exc:
        raise Refused(f"{f.origin}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(d, dict) or not isinstance(d.get("results"), dict):
        raise Refused(f"{f.origin}: not an asv results file")
    if d.get("version") != ASV_RESULTS_VERSION:
        raise Refused(f"{f.origin}: asv results format {d.get('version')!r} is not {ASV_RESULTS_VERSION}; "
                      "run `asv update` to convert it")
    columns = d.get("result_columns") or []
    params_run = d.get("params") or {}
    if not isinstance(params_run, dict) or not isinstance(benchmarks, dict) or not isinstance(columns, list):
        raise Refused(f"{f.origin}: asv results 'params', 'result_columns' or benchmarks.json of the wrong type")
    machine_name = params_run.get("machine") or (machine.get("machine") if isinstance(machine, dict) else None)
    if not machine_name:
        raise Refused(f"{f.origin}: asv results name no machine")
    for what, text in (("machine", machine_name), ("env_name", d.get("env_name") or "asv"),
                       ("commit_hash", d.get("commit_hash") or "unknown")):
        if not isinstance(text, str) or not text.strip() or len(text) > 256 or intake.has_control(text):
            raise Refused(f"{f.origin}: asv results field {what!r} is not a short line of text")
    try:
        started = dt.datetime.fromtimestamp((d.get("date") or 0) / 1000, dt.timezone.utc).isoformat()
    except (TypeError, ValueError, OverflowError):
        raise Refused(f"{f.origin}: asv results date {d.get('date')!r} is not a time") from None
    rows_of: dict[str, dict[str, Any]] = {}
    for name, values in d["results"].items():
        if not isinstance(values, list):
            raise Refused(f"{f.origin}: result of {name!r} is not a list")
        rows_of[name] = dict(zip(columns, values, strict=False))
    by_class: dict[str, list[str]] = {}
    for name in sorted(rows_of):
        by_class.setdefault(name.rpartition(".")[0], []).append(name)
    combos, rows, ok, med, counts = [], [], [], [], {}
    inferred_names = False
    n_rows = 0
    seen: set = set()
    for cls, names in by_class.items():
        joined: dict[str, str] = {}  # metric benchmark -> the time benchmark whose record carries it
        times = [n for n in names if n.rsplit(".", 1)[-1] in _ASV_TIME_TRACKS]
        if len(times) == 1:
            for n in names:
                if n.rsplit(".", 1)[-1] in _ASV_JOINED and rows_of[n].get("params") == rows_of[times[0]].get("params"):
                    joined[n] = times[0]
        direction = next((dv for word, dv in _DIRECTION_OF_CLASS if cls.rsplit(".", 1)[-1].endswith(word)), None)
        for name in names:
            if name in joined:
                continue
            row = rows_of[name]
            bench = benchmarks.get(name) or {}
            unit = _asv_unit(name, bench)
            is_time = unit == "seconds"
            params = row.get("params") or []
            _check_asv_row(f.origin, name, row, bench, n_rows := n_rows + _asv_product(f.origin, name, params))
            param_names, inferred = _param_names(bench, params)
            inferred_names |= inferred
            combos_here = list(itertools.product(*params)) or [()]
            results = row.get("result")
            if not isinstance(results, list) or not params:
                results = [results]
            n_here = len(combos_here)
            samples = row.get("samples") or [None] * n_here
            q25, q75 = row.get("stats_q_25") or [None] * n_here, row.get("stats_q_75") or [None] * n_here
            metrics = {m.rsplit(".", 1)[-1]: rows_of[m].get("result") for m, t in joined.items() if t == name}
            if is_time:
                _check_times(f"{f.origin}: asv result {name[:80]!r}", results, q25, q75, samples)
            module = name.split(".")[0]
            for i, combo in enumerate(combos_here):
                pdict = {k: (v.strip("'\"") if isinstance(v, str) else v)
                         for k, v in zip(param_names, combo, strict=False)}
                fields = {k: str(pdict.pop(k)) for k in _RECORD_FIELDS if k in pdict}
                if "dtype" not in fields and "precision" in pdict:  # PyTorch's classes: "fp32/tf32", "fp16", ...
                    fields["dtype"] = str(pdict["precision"]).partition("/")[0]
                settings = {"asv_benchmark": name, **pdict}
                backend = fields.get("backend") or (module[6:] if module.startswith("bench_") else module)
                vals = (fields.get("case", name), backend, fields.get("direction", direction or "-"),
                        fields.get("algo", "-"), fields.get("math", "-"), fields.get("dtype", "-"),
                        fields.get("layout", "-"))
                _check_identity(f"{f.origin}: asv result {name[:80]!r}", vals, settings, seen)
                combos.append(combo_row(vals, settings, RecordKind.MEASUREMENT))
                value = results[i] if i < len(results) else None
                status = _asv_status(value)
                scale = 1000.0 if is_time else 1.0
                sm = samples[i] if i < len(samples) else None
                med_ms = value * scale if (status == OK and is_time) else None
                iqr = None
                if is_time and i < len(q25) and q25[i] is not None and q75[i] is not None:
                    iqr = (q75[i] - q25[i]) * scale
                extra: dict[str, Any] = {} if is_time else {"value": value if status == OK else None,
                                                            "unit": unit or "not recorded (no benchmarks.json)"}
                got = {m: (v[i] if isinstance(v, list) and i < len(v) else None) for m, v in metrics.items()}
                rel_l2 = _finite_or_none(got.get("track_rel_l2_error"))
                stable = _finite_or_none(got.get("track_bitwise_stable"))
                repeat_equal = None if stable is None else int(stable == 1.0)
                rows.append((status, None, None, med_ms, iqr, None, len(sm) if sm else None,
                             "asv" if is_time else None, None,
                             samples_blob([s * scale for s in sm]) if sm and is_time else None, None,
                             None, rel_l2, None, None, None, None, None, None, None, None, repeat_equal, None, None,
                             None, None, extra or None))
                counts[status] = counts.get(status, 0) + 1
                ok.append(status == OK)
                med.append(np.nan if med_ms is None else med_ms)
    env = d.get("env_name") or "asv"
    commit = d.get("commit_hash") or "unknown"
    fp = {"asv_machine": machine or params_run, "python": d.get("python"), "requirements": d.get("requirements"),
          "env_vars": d.get("env_vars"),
          "asv_param_names": "inferred from the values (no benchmarks.json)" if inferred_names else "benchmarks.json"}
    gpu = machine.get("gpu") if isinstance(machine, dict) else None
    n = len(rows)
    run = {"run_id": f"asv-{commit[:12]}-{env}", "machine": machine_name, "image": env, "image_id": None,
           "started": started, "night": night(started), "suite_revision": commit, "hardware": "gpu" if gpu else
           "unknown", "gpu_model": gpu if isinstance(gpu, str) else None, "sm": None, "source": "asv",
           "origin": f.origin, "digest": f"a:{sha1_16(f.data)}:{sha1_16(f.machine_json)}", "complete": 1,
           "n_records": n, "n_ok": counts.get(OK, 0), "n_rankings": 0, "counts": json.dumps(counts, sort_keys=True),
           "fingerprint": json.dumps(fp, sort_keys=True, default=str), "options": "{}", "end_info": None}
    vectors = {"ok": np.array(ok, dtype=bool), "median": np.array(med, dtype=np.float64),
               "norm_err": np.full(n, np.nan), "hash": np.zeros(n, dtype=np.int64), "chosen": [None] * n}
    return ParsedRun(run, combos, rows, [], vectors)

