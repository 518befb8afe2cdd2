"""impact: ResNet-50's convolution time for what PyTorch runs by default, each layer weighted by its calls."""

import json

import pytest
from _fleet_data import FIXTURES

from harness.analysis.impact import framework_default, impact
from harness.collect.ingest import collect
from harness.collect.store import Store
from harness.core.cases import resnet50_calls

LAYER = "resnet50.layer3.1.conv1.n32"  # a 1x1 shape ResNet-50 calls five times a pass


def test_the_model_calls_each_shape_as_torchvision_lists_it():
    calls = resnet50_calls(32)
    assert sum(calls.values()) == 53 and len(calls) == 23
    assert calls[LAYER] == 5 and calls["resnet50.layer1.0.conv3.n32"] == 4  # conv3 x3 and the downsample


def _default(r, direction="fwd", dtype="fp32"):
    return (r.kind == "measurement" and r.backend == "torch" and r.status == "ok"
            and r.case == LAYER and r.direction == direction and r.dtype == dtype and r.layout == "NCHW"
            and r.settings == {"benchmark": True, "deterministic": False, "tf32": True})


def test_a_layer_made_10_percent_slower_moves_the_impact_by_its_weighted_share(tmp_path, capsys):
    from _report_data import next_night, unpack

    if not (FIXTURES / "h200-fwd-default.tar.gz").exists():
        pytest.skip("fixture not committed")
    base = unpack("h200-fwd-default", tmp_path / "base")
    head, changed = next_night(base, tmp_path / "next", slower=1.10, pick=_default)
    db = tmp_path / "s.sqlite"
    assert not collect(db, [base, head]).refused
    with Store(db) as s:
        a, b = (s.records(r["id"]) for r in s.runs())
    rows = {(r["pass"], r["dtype"], r["layout"]): r for r in impact(a, b, "H200")}
    row = rows[("forward", "fp32", "NCHW")]
    assert row["calls"] == row["all_calls"] == 53  # every layer of the forward pass measured on both sides
    layer = next(x for x in a if x.identity_key() == next(y.identity_key() for y in a if framework_default(y)
                                                          and y.case == LAYER and y.dtype == "fp32"
                                                          and y.layout == "NCHW"))
    share = 5 * layer.median_ms / row["base_ms"]
    assert row["change"] == pytest.approx(0.10 * share, rel=1e-6)
    assert row["low"] <= row["change"] <= row["high"]
    assert row["line"].startswith(f"ResNet-50 convolutions (batch 32, PyTorch defaults), forward fp32 NCHW, H200: "
                                  f"{row['change'] * 100:+.1f} % (")
    assert all(r["change"] == 0 for k, r in rows.items() if k != ("forward", "fp32", "NCHW"))
    assert changed["case"] == LAYER
    # convbench compare --json carries the same numbers under "impact"; the index and the changes page show them
    from harness import cli
    from harness.report import build

    ids = [json.loads((d / "run.json").read_text())["run_id"] for d in (base, head)]
    capsys.readouterr()
    cli.main(["compare", *ids, "--store", str(db), "--json"])
    out = json.loads(capsys.readouterr().out)
    [got] = [r for r in out["impact"] if (r["pass"], r["dtype"], r["layout"], r["choice"])
             == ("forward", "fp32", "NCHW", "cudnn.benchmark")]
    assert got["change"] == pytest.approx(row["change"]) and got["line"].split(": ", 1)[1] == row["line"].split(": ", 1)[1]
    with Store(db) as s:
        build(s, tmp_path / "site")
    words = got["line"].split(": ", 1)[1]
    assert words in (tmp_path / "site" / "index.html").read_text()
    assert words in next((tmp_path / "site" / "changes").glob("*.html")).read_text()
