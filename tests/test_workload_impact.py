"""Workload impact beyond ResNet-50's forward pass: its training step under PyTorch's two kernel choices, pooled from a
forward and a backward study of one GPU, and onnxruntime's models from whole-model latency; what is missing said
instead of a number. All on the committed H200 runs."""

import json
import re
from collections import Counter

import pytest
from _fleet_data import FIXTURES

from harness.analysis.ort_impact import DEFAULTS, conv_shapes
from harness.analysis.workload import workload
from harness.backends.ort.architectures import conv_layers
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.cases import CATALOGUE, resnet50_calls


def _need(*names):
    if not all((FIXTURES / f"{n}.tar.gz").exists() for n in names):
        pytest.skip("fixtures not committed")
    return [FIXTURES / f"{n}.tar.gz" for n in names]


def test_the_layer_lists_come_from_the_architecture_the_models_are_built_from():
    # ResNet-50 walked on shapes gives the catalogue's call counts (cases.resnet50_calls)
    shapes = conv_shapes("resnet50", 32)
    for case, n in resnet50_calls(32).items():
        c = CATALOGUE[case]
        assert shapes[(c.n, c.c, c.h, c.w, c.k, c.r, c.s, c.pad[0], c.stride[0], c.groups)] == n, case
    layers = conv_layers("mobilenetv2", 1)
    assert len(layers) == 52 and layers[0][0] == "features.0.0" and layers[-1][0] == "features.18.0"
    depthwise = [g for _, g in layers if g[-1] > 1]
    assert len(depthwise) == 17 and all(g[-1] == g[1] == g[4] for g in depthwise)  # one per inverted residual


def _rows(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def test_a_training_step_pools_a_gpus_forward_and_backward_studies(tmp_path):
    from harness.analysis import paired_judgement
    from harness.report import build

    db = tmp_path / "s.sqlite"
    assert not collect(db, _need("h200-upgrade-cudnn927-fwd", "h200-upgrade-cudnn927-bwd")).refused
    with Store(db) as s:
        studies = paired_judgement.studies(s)
        legs = [st["legs"]["0"] for st in studies]
        assert len(legs) == 2
        # each study alone: no training step, and it says what it lacks
        for leg in legs:
            rows = workload(leg["records"]["A"], leg["records"]["B"], "H200")
            step = _rows(rows, **{"pass": "training step"})
            assert step and all(r["change"] is None and "not measured on base nor head" in r["missing"]
                                and "no number" in r["line"] for r in step)
        pooled = [{r.identity_key(): r for leg in legs for r in leg["records"][role]} for role in ("A", "B")]
        rows = workload(*pooled, "H200")
        for choice in ("defaults", "cudnn.benchmark"):
            for dtype in ("fp32", "fp16", "bf16"):
                step, fwd, bwd = (_rows(rows, choice=choice, dtype=dtype, layout="NHWC", **{"pass": p})
                                  for p in ("training step", "forward", "backward"))
                assert len(step) == len(fwd) == len(bwd) == 1
                step, fwd, bwd = step[0], fwd[0], bwd[0]
                # the step's convolutions are the forward and the backward pass's, each call weighted once
                assert step["base_ms"] == pytest.approx(fwd["base_ms"] + bwd["base_ms"])
                assert step["head_ms"] == pytest.approx(fwd["head_ms"] + bwd["head_ms"])
                assert step["low"] <= step["change"] <= step["high"]
                # the stem's input needs no gradient: 52 bwd_data calls, 53 fwd and bwd_filter
                cov = step["coverage"]
                assert cov["fwd"] == (53, 53) and cov["bwd_data"][1] == 52 and cov["bwd_filter"][1] == 53
                assert 0 < cov["bwd_data"][0] < 52 and "partial:" in step["line"]  # six of the layers timed
                assert step["line"].split("; ")[1] == ("cudnn.benchmark on" if choice == "cudnn.benchmark"
                                                        else "cudnn.benchmark off")
                assert re.match(rf"ResNet-50 convolutions \(batch 32, PyTorch defaults\), training step {dtype} NHWC, "
                                r"H200: [+-]\d+\.\d % \([+-]\d+\.\d to [+-]\d+\.\d %\)", step["line"])
        build(s, tmp_path / "site")
    page = (tmp_path / "site" / "upgrade.html").read_text()
    verdict = page[page.index('class="answer verdict"'):page.index('id="study-1"')]
    assert re.search(r"training step fp16 NHWC, NVIDIA H200: [+-]\d+\.\d % \([+-]\d+\.\d to [+-]\d+\.\d %, 95 % "
                     r"interval, one GPU\); partial", verdict)
    assert "<th>training step</th>" in verdict


def _ort_default(model, search):
    def pick(r):
        s = r.settings
        return (r.case == f"model.{model}" and r.status == "ok" and s.get("cudnn_conv_algo_search") == search
                and all(s.get(k) == v for k, v in DEFAULTS.items()))
    return pick


def test_onnxruntime_models_from_whole_model_latency_across_a_stack_change(tmp_path, capsys):
    from harness import cli

    db = tmp_path / "s.sqlite"
    assert not collect(db, _need("h200-ort1192", "h200-ort-asv", "h200-ort")).refused
    with Store(db) as s:
        runs = {r["image"] + ("-cut" if not r["complete"] else ""): r for r in s.runs()}
        recs = {k: s.records(r["id"]) for k, r in runs.items()}
    old, new, cut = runs["ort1192"], runs["native"], runs["native-cut"]
    capsys.readouterr()
    cli.main(["compare", old["run_id"], new["run_id"], "--store", str(db), "--json"])
    out = json.loads(capsys.readouterr().out)
    got = _rows(out["impact"], framework="onnxruntime")
    assert Counter((r["model"], r["choice"]) for r in got) == Counter(
        {(m, c): 1 for m in ("ResNet-50", "MobileNetV2") for c in ("EXHAUSTIVE", "HEURISTIC")})
    for r in got:
        model = "mobilenetv2" if r["model"] == "MobileNetV2" else "resnet50"
        b, h = (next(x for x in recs[k] if _ort_default(model, r["choice"])(x)) for k in ("ort1192", "native"))
        assert (r["base_ms"], r["head_ms"]) == (b.median_ms, h.median_ms)
        assert r["change"] == pytest.approx(h.median_ms / b.median_ms - 1)
        assert r["low"] <= r["change"] <= r["high"] and r["basis"] == "whole-model"
        # what the number is computed from, said plainly: no per-layer record of the model's shapes in the store
        assert f"from whole-model latency (its {sum(conv_shapes(model, 1).values())} convolutions" in r["line"]
        assert f"per-layer onnxruntime records of 0 of its {len(conv_shapes(model, 1))} conv shapes" in r["line"]
    # the interrupted run timed MobileNetV2 under EXHAUSTIVE with TF32 off only: its impact says what is missing
    cli.main(["compare", cut["run_id"], new["run_id"], "--store", str(db), "--json"])
    out = json.loads(capsys.readouterr().out)
    mbv2 = _rows(out["impact"], model="MobileNetV2")
    assert {r["choice"] for r in mbv2} == {"EXHAUSTIVE", "HEURISTIC"}
    assert all(r["change"] is None and r["missing"].startswith("not measured on base") for r in mbv2)
    assert all(r["change"] is not None for r in _rows(out["impact"], model="ResNet-50", framework="onnxruntime"))
    cli.main(["compare", cut["run_id"], new["run_id"], "--store", str(db)])
    text = capsys.readouterr().out
    assert "MobileNetV2 (onnxruntime) whole model: no number for 1 dtype/layout/choice row(s): not measured on base" \
        in text


def test_an_onnxruntime_model_made_slower_shows_on_the_index_and_the_changes_page(tmp_path):
    from _report_data import next_night, unpack

    from harness.report import build

    _need("h200-ort-asv")
    base = unpack("h200-ort-asv", tmp_path / "base")
    head, changed = next_night(base, tmp_path / "next", slower=1.10, pick=_ort_default("mobilenetv2", "EXHAUSTIVE"))
    db = tmp_path / "s.sqlite"
    assert not collect(db, [base, head]).refused
    with Store(db) as s:
        a, b = (s.records(r["id"]) for r in s.runs())
        build(s, tmp_path / "site")
    rows = workload(a, b, "NVIDIA H200")
    [row] = _rows(rows, model="MobileNetV2", choice="EXHAUSTIVE")
    assert row["change"] == pytest.approx(0.10) and row["low"] <= row["change"] <= row["high"]
    assert all(r["change"] == 0 for r in rows if r is not row)  # every other row: the same records both sides
    words = row["line"].split(": ", 1)[1]
    assert words in (tmp_path / "site" / "index.html").read_text()
    changes = next((tmp_path / "site" / "changes").glob("*.html")).read_text()
    assert words in changes and "<th>whole model</th>" in changes
