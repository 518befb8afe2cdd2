"""Which algorithm or engine each Conv ran, read from cuDNN's own logs of a worker process.

Two logs are read, both switched on by environment variables before the process loads cuDNN:
- cuDNN's API log (cuDNN 9: CUDNN_LOGLEVEL_DBG=3; cuDNN 8: CUDNN_LOGINFO_DBG=1; CUDNN_LOGDEST_DBG=<file>):
  every API call in order. Legacy convolutions (onnxruntime <= 1.19, or a cuDNN 8 build) appear as
  cudnnConvolutionForward / cudnnConvolutionBiasActivationForward with their ``algo``; frontend convolutions
  (onnxruntime >= 1.20 with cuDNN 9) appear as cudnnBackendExecute calls.
- the cuDNN frontend's log (CUDNN_FRONTEND_LOG_INFO=1, CUDNN_FRONTEND_LOG_FILE=<file>), compiled into
  onnxruntime with the header-only frontend: one "Executing <plan tag>" line per execution, where the tag is
  ``eng<global engine index>_k<knob>=<choice>...`` (cudnn_frontend_ExecutionPlan.h, buildTag).

Executions come in node order, one per Conv node per inference, so a known number of runs per session maps
them onto the Conv nodes (in onnxruntime's execution order) without guessing; a count that does not add up
is reported as such instead of being forced into a mapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER = re.compile(r"^I! CuDNN \(v(\d+)[^)]*\) function (\w+)\(\) called:", re.MULTILINE)
_ALGO = re.compile(r"algo: type=cudnnConvolutionFwdAlgo_t; val=(?:CUDNN_CONVOLUTION_FWD_ALGO_)?(\w+)")
_MATH = re.compile(r"mathType: type=cudnnMathType_t; val=(\w+)")
_ENGINE_INDEX = re.compile(r"(?:engine_id|engineId|globalIndex|GLOBAL_INDEX)\b[^\n]*?(?:val=\[?|\[0\]: type=int64_t; val=)(-?\d+)")
_FE_EXEC = re.compile(r"\[cudnn_frontend\] INFO: Executing (.*?)(?:\.\.\.)?\s*$", re.MULTILINE)
# Newer frontends also log the *graph* before its plan: "Executing gid 7" / "Executing graph_uid 7". On the H200
# (onnxruntime-gpu 1.31.1) every conv execution gave such a line and then "Executing eng28_k2=4...":
# counted as executions they doubled the count and no node could be mapped.
_FE_GRAPH = re.compile(r"^(?:gid|graph_uid)\s+\d+$")
_FE_HEUR = re.compile(r"Getting plan from heuristics", re.MULTILINE)
_ENGINE_TAG = re.compile(r"eng-?\d+(?:_k\d+=-?\d+)*")

LEGACY_CONV_CALLS = ("cudnnConvolutionForward", "cudnnConvolutionBiasActivationForward")
FIND_CALLS = ("cudnnFindConvolutionForwardAlgorithm", "cudnnFindConvolutionForwardAlgorithmEx")
GET_CALLS = ("cudnnGetConvolutionForwardAlgorithm_v7",)


@dataclass
class ApiLog:
    version: int | None = None  # e.g. 91900 for cuDNN 9.19.0, as the loaded library prints it
    events: list[tuple[str, str]] = field(default_factory=list)  # ("legacy", ALGO[/MATH]) or ("backend", id|"?")
    finds: int = 0
    get_v7: int = 0
    calls: int = 0

    def conv_path(self) -> str | None:
        kinds = {k for k, _ in self.events}
        if not kinds:
            return None
        if kinds == {"backend"}:
            return "cudnn_frontend"
        if kinds == {"legacy"}:
            return "legacy_find" if self.finds else ("legacy_get_v7" if self.get_v7 else "legacy")
        return "mixed"


def parse_api(text: str) -> ApiLog:
    """Conv-relevant calls of a cuDNN API log, in call order."""
    out = ApiLog()
    heads = list(_HEADER.finditer(text))
    out.calls = len(heads)
    for i, m in enumerate(heads):
        if out.version is None:
            out.version = int(m.group(1))
        name = m.group(2)
        body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)] \
            if name in _WITH_BODY else ""
        _api_event(out, name, body)
    return out


_WITH_BODY = (*LEGACY_CONV_CALLS, "cudnnBackendExecute")


def _api_event(out: ApiLog, name: str, body: str) -> None:
    if name in LEGACY_CONV_CALLS:
        algo = _ALGO.search(body)
        math = _MATH.search(body)
        label = algo.group(1) if algo else "?"
        if math:
            label += "/" + math.group(1).replace("CUDNN_", "")
        out.events.append(("legacy", label))
    elif name == "cudnnBackendExecute":
        eng = _ENGINE_INDEX.search(body)
        out.events.append(("backend", f"eng{eng.group(1)}" if eng else "?"))
    elif name in FIND_CALLS:
        out.finds += 1
    elif name in GET_CALLS:
        out.get_v7 += 1


def parse_api_file(path: str, limit: int = 4 << 30) -> ApiLog:
    """parse_api for a log file, read line by line: only conv-relevant calls keep their body.

    cuDNN's level-3 API log of one onnxruntime process is tens of MB (every descriptor call of every plan
    build); reading it whole and slicing a body per call was a serial cost after every drift setting.
    """
    out = ApiLog()
    name: str | None = None
    body: list[str] = []
    read = 0

    def close() -> None:
        if name is not None:
            _api_event(out, name, "".join(body))

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            read += len(line)
            if read > limit:
                break
            if line.startswith("I! CuDNN"):
                m = _HEADER.match(line)
                if m:
                    close()
                    out.calls += 1
                    if out.version is None:
                        out.version = int(m.group(1))
                    name = m.group(2)
                    body = []
                    continue
            if name in _WITH_BODY:
                body.append(line)
    close()
    return out


@dataclass
class FrontendLog:
    executions: list[str] = field(default_factory=list)  # engine tag per plan execution, in order
    heuristic_queries: int = 0
    graph_executions: int = 0  # "Executing gid N" lines: the graph around a plan, not a conv execution


def parse_frontend(text: str) -> FrontendLog:
    out = FrontendLog(heuristic_queries=len(_FE_HEUR.findall(text)))
    for m in _FE_EXEC.finditer(text):
        what = m.group(1).strip()
        if _FE_GRAPH.match(what):
            out.graph_executions += 1
            continue
        tags = _ENGINE_TAG.findall(what)
        out.executions.append(tags[-1] if tags else what)
    return out


def conv_sequence(api: ApiLog | None, fe: FrontendLog | None) -> tuple[list[str], str]:
    """One label per conv execution, in order, and where the labels came from.

    Frontend tags name the engine and its knobs; they replace the API log's backend executions one for one
    when the counts agree. Legacy calls keep their algorithm enum name.
    """
    api_events = api.events if api else []
    fe_tags = fe.executions if fe else []
    n_backend = sum(1 for k, _ in api_events if k == "backend")
    if api_events and fe_tags and n_backend == len(fe_tags):
        tags = iter(fe_tags)
        return [next(tags) if k == "backend" else v for k, v in api_events], "api+frontend"
    if fe_tags and n_backend == len(api_events):
        # Frontend-only convs whose API log counts cudnnBackendExecute differently from the frontend's plan
        # executions (an H200 run logged exactly two per conv execution): the frontend names
        # one plan per execution, which is what the node mapping needs.
        return list(fe_tags), "frontend"
    if api_events:
        return [v for _, v in api_events], "api"
    if fe_tags:
        return list(fe_tags), "frontend"
    return [], "none"


def assign(seq: list[str], runs_per_session: list[int], nodes: list[str]) -> tuple[list[dict[str, str]] | None, str | None]:
    """Split ``seq`` into sessions (each ``runs`` inferences of ``len(nodes)`` convs) and name each execution.

    Returns (per-session {node: label}, None), or (None, why) when the counts do not add up. A node whose
    label changed between runs of one session gets "A->B".
    """
    n = len(nodes)
    expected = sum(runs_per_session) * n
    if n == 0:
        return None, "the graph has no Conv node"
    if len(seq) != expected:
        return None, (f"the log has {len(seq)} conv executions; {sum(runs_per_session)} runs x {n} Conv nodes "
                      f"= {expected} were expected")
    sessions, pos = [], 0
    for runs in runs_per_session:
        per_node: dict[str, str] = {}
        for _ in range(runs):
            for node, label in zip(nodes, seq[pos:pos + n], strict=False):
                prev = per_node.get(node)
                if prev is None:
                    per_node[node] = label
                elif prev.split("->")[-1] != label:
                    per_node[node] = f"{prev}->{label}"
            pos += n
        sessions.append(per_node)
    return sessions, None


def engine_counts(per_node: dict[str, str]) -> str:
    """Compact summary, e.g. "eng0:30,eng28:23" (engine or algorithm name without knobs : number of nodes)."""
    counts: dict[str, int] = {}
    for label in per_node.values():
        key = label.split("_k")[0] if label.startswith("eng") else label
        counts[key] = counts.get(key, 0) + 1
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def differences(sessions: list[dict[str, str]], labels: list[str]) -> dict[str, dict[str, str]]:
    """Nodes whose label is not the same in every session: {node: {session label: algo}}."""
    out: dict[str, dict[str, str]] = {}
    if not sessions:
        return out
    for node in sessions[0]:
        values = {lab: s.get(node, "?") for lab, s in zip(labels, sessions, strict=False)}
        if len(set(values.values())) > 1:
            out[node] = values
    return out


def log_env(api_path: str, frontend_path: str) -> dict[str, str]:
    """Environment that makes cuDNN 8 and 9 and the frontend write their logs to these files."""
    return {
        "CUDNN_LOGLEVEL_DBG": "3",  # cuDNN 9: 3 = info, every API call
        "CUDNN_LOGINFO_DBG": "1",  # cuDNN 8
        "CUDNN_LOGDEST_DBG": api_path,
        "CUDNN_FRONTEND_LOG_INFO": "1",
        "CUDNN_FRONTEND_LOG_FILE": frontend_path,
    }


def version_string(v: int | None) -> str | None:
    """91900 -> "9.19.0"; 8907 -> "8.9.7" (cuDNN 8 packs major*1000 + minor*100 + patch)."""
    if v is None:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"
