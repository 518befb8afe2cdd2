"""Generated hostile inputs where they enter (issue 42): journals whose lines have any field set to any JSON value,
asv results whose parameters hold any text, Kubernetes manifests and scrontab lines rendered from any value. The
property each time: refused in one line, or taken exactly as given (stored, keyed, parsed back), never anything
between and never an exception."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
from _fleet_data import record, write_run
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.records import IDENTITY_FIELDS, dumps, record_key
from harness.core.schema import SchemaError, check_record
from harness.deploy import imagematrix, k8s, slurm

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
FLEET_MATRIX = Path(__file__).parent / "fixtures" / "fleet_matrix.toml"
SETTINGS = hsettings(max_examples=60, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_text = st.text(st.sampled_from(list("aZ9 |,=.-_:/\"'\\$`;\x00\x1b\n\r\u2028\u202e\ud800é☃")), max_size=12)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), _text,
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -0.0, 5e-324]))
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(_text, inner, max_size=3)), max_leaves=6)


def _paths(d: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in d.items():
        out.append(prefix + (k,))
        if isinstance(v, dict):
            out.extend(_paths(v, prefix + (k,)))
    return out


_LINE = json.loads(dumps(record("a", settings={"tf32": True}, samples=[1.0, 1.1, 0.9])))
_FIELDS = _paths(_LINE) + [("unknown",), ("time", "unknown"), ("settings", "x|y"), ("settings", "a,b=c")]


def _set(d: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {}) if isinstance(d.get(k, {}), dict) else d
    d[path[-1]] = value


def _schema_accepts(d: dict) -> bool:
    try:
        check_record(d)
    except SchemaError:
        return False
    return True


@SETTINGS
@given(path=st.sampled_from(_FIELDS), value=_json, line=st.integers(0, 2))
def test_a_journal_line_with_any_field_of_any_value_is_stored_exactly_or_refused_in_one_line(
        tmp_path_factory, path, value, line):
    tmp = tmp_path_factory.mktemp("j")
    d = write_run(tmp / "r", "m1", "img", T0, [record("a"), record("b"), record("c")])
    lines = (d / "records.jsonl").read_text().splitlines()
    rec = json.loads(lines[line]) if line else json.loads(json.dumps(_LINE))
    _set(rec, path, value)
    try:
        text = json.dumps(rec, allow_nan=True)
    except (UnicodeEncodeError, ValueError):
        return
    lines[line] = text
    (d / "records.jsonl").write_text("\n".join(lines) + "\n", errors="surrogatepass")
    summary = collect(tmp / "s.sqlite", [tmp / "r"])  # raises nothing, whatever the line holds
    if summary.refused:
        assert summary.added == 0 and len(summary.refused) == 1 and "\n" not in summary.refused[0]
        assert str(d) in summary.refused[0]
        return
    assert summary.added == 1
    parsed = json.loads(lines[line])
    assert _schema_accepts(parsed), f"collect stored a line its schema refuses: {text[:300]}"
    with Store(tmp / "s.sqlite") as s:
        (run,) = s.runs()
        stored = {record_key(*(getattr(r, f) for f in IDENTITY_FIELDS), r.listed_settings): r
                  for r in s.records(run["id"])}
    want = record_key(*(parsed[f] for f in IDENTITY_FIELDS), parsed.get("settings") or {})
    others = {json.loads(x)["case"] for i, x in enumerate(lines) if i != line}
    assert want in stored and len(stored) == 1 + len(others - {parsed["case"]})
    assert stored[want].status == parsed["status"]


# ---- asv results: the keys of any accepted parameters are distinct per combination ---------------------------

def _asv_tree(root: Path, names: list[str], values: list[list]) -> None:
    name = "bench_torch.TorchForward.time_conv"
    n = 1
    for v in values:
        n *= max(1, len(v))
    params = [[json.dumps(x) if isinstance(x, str) else x for x in v] for v in values]
    machine = root / "asv-results" / "vm"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text(json.dumps({"machine": "vm", "version": 1}))
    (root / "asv-results" / "benchmarks.json").write_text(json.dumps(
        {name: {"name": name, "param_names": names, "params": params, "type": "time", "unit": "seconds",
                "version": "v1"}, "version": 2}))
    (machine / "0000-env.json").write_text(json.dumps(
        {"commit_hash": "0" * 40, "env_name": "env", "date": 1796313767000, "params": {"machine": "vm"},
         "python": "3.11", "requirements": {}, "env_vars": {}, "version": 2, "durations": {},
         "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                            "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples"],
         "results": {name: [[1e-3] * n, params, "v1", 0, 1.0, None, None, [9e-4] * n, [1.1e-3] * n, None, None,
                            [[1e-3] * 3] * n]}}))


_pvalue = st.one_of(_text.filter(lambda t: "\ud800" not in t), st.integers(-5, 5))


@SETTINGS
@given(names=st.lists(st.sampled_from(["case", "algo", "math", "dtype", "a", "a|b", "a,b", "a=b", "x\x1b"]),
                      min_size=1, max_size=3, unique=True),
       values=st.lists(st.lists(_pvalue, min_size=1, max_size=3, unique_by=str), min_size=3, max_size=3))
def test_asv_parameters_of_any_text_are_refused_or_stored_one_record_per_combination(tmp_path_factory, names,
                                                                                      values):
    tmp = tmp_path_factory.mktemp("a")
    values = values[:len(names)]
    _asv_tree(tmp / "src", names, values)
    summary = collect(tmp / "s.sqlite", [tmp / "src"])
    if summary.refused:
        assert summary.added == 0 and all("\n" not in r for r in summary.refused)
        return
    n = 1
    for v in values:
        n *= len(v)
    with Store(tmp / "s.sqlite") as s:
        (run,) = s.runs()
        recs = s.records(run["id"])
    keys = {record_key(*(getattr(r, f) for f in IDENTITY_FIELDS), r.listed_settings) for r in recs}
    assert len(recs) == n and len(keys) == n, "two parameter combinations were stored as one"


# ---- manifests: Kubernetes YAML and the scrontab line, from any value -----------------------------------------

yaml = pytest.importorskip("yaml")
_value = st.text(st.one_of(st.sampled_from(list(" !\"#$%&'()*+,-.:;<=>?@[\\]^_`{|}~aZ9/é☃")),
                           st.characters(blacklist_categories=("Cs",))), min_size=1, max_size=20)


@SETTINGS
@given(cases=_value, registry=st.one_of(st.just(""), _value), selector=st.dictionaries(_value, _value, max_size=2))
def test_k8s_manifests_of_any_value_parse_back_exactly_or_are_refused(tmp_path_factory, cases, registry, selector):
    m = imagematrix.load_matrix()
    pool = dataclasses.replace(next(iter(m.pools.values())), k8s_node_selector=dict(selector))
    m.pools[pool.name] = pool
    try:
        files = k8s.render_k8s(m, list(m.rows.values()), registry=registry, cases=cases)
    except k8s.K8sError as exc:
        assert "\n" not in str(exc)
        return
    docs = [doc for text in files.values() for doc in yaml.safe_load_all(text)]
    jobs = [d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] != "convbench-collect"]
    assert jobs
    for job in jobs:
        spec = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for c in spec["initContainers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["CONVBENCH_CASES"].replace("$$", "$") == cases
            assert c["image"].startswith(registry.rstrip("/"))
        if job["metadata"]["labels"]["convbench/pool"] == k8s.dns_name(pool.name):
            assert spec["nodeSelector"] == selector
    kv = pytest.importorskip("kubernetes_validate")
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)


FAKE_SBATCH = '#!/bin/bash\nprintf "%s\\n" "$#" "$@" > "$SBATCH_LOG"\n'


@SETTINGS
@given(fleet_dir=_value, at=st.one_of(st.just("0 1 * * *"), _value))
def test_the_scrontab_line_of_any_value_submits_exactly_its_script_or_is_refused(tmp_path_factory, fleet_dir, at):
    tmp = tmp_path_factory.mktemp("cron")
    m = imagematrix.load_matrix(FLEET_MATRIX)
    canary = tmp / "canary"
    fleet_dir = fleet_dir.replace("CANARY", str(canary))
    try:
        files = slurm.render_slurm(m, [], results="/r", outbox="/o", docker=False, fleet_dir=fleet_dir, at=at)
    except slurm.RenderError as exc:
        assert "\n" not in str(exc)
        return
    text = files["slurm/convbench-ci.scrontab"]
    (line,) = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert line.startswith(at + " sbatch ")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "sbatch").write_text(FAKE_SBATCH)
    (tmp / "bin" / "sbatch").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp / 'bin'}:{os.environ['PATH']}", SBATCH_LOG=str(tmp / "argv"))
    command = line[len(at) + 1:]  # what cron hands to the shell
    subprocess.run(["bash", "-c", command], env=env, cwd=tmp, check=True, timeout=30)
    argv = (tmp / "argv").read_text().splitlines()
    assert argv == ["1", f"{fleet_dir.rstrip('/')}/slurm/convbench-ci.sbatch"]
    assert not canary.exists()
