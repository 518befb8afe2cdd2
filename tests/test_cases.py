import pytest

from harness.core import cases


def test_ids_are_unique_and_stable_names():
    ids = list(cases.CATALOGUE)
    assert len(ids) == len(set(ids))
    assert {"seed.c64", "seed.c8", "seed.c4"} <= set(ids)


def test_seed_case_is_the_reported_shape():
    c = cases.get("seed.c64")
    assert c.x_shape() == (1, 64, 512, 512) and c.w_shape() == (64, 64, 3, 3)
    assert c.pad == (0, 0) and c.y_shape() == (1, 64, 510, 510)
    assert c.reduction == 576


def test_resnet50_has_every_distinct_layer_at_both_batches():
    for batch in (1, 32):
        layers = [c for c in cases.CATALOGUE.values() if c.id.startswith("resnet50.") and c.n == batch]
        shapes = {(c.c, c.h, c.k, c.r, c.stride) for c in layers}
        assert len(layers) == len(shapes) == 23  # conv1 + 4 + 6 + 6 + 6 distinct shapes
    stem = cases.get("resnet50.conv1.n32")
    assert (stem.r, stem.stride, stem.pad, stem.out_hw) == (7, (2, 2), (3, 3), (112, 112))
    last = cases.get("resnet50.layer4.0.conv2.n32")
    assert last.out_hw == (7, 7) and last.reduction == 512 * 9


def test_special_cases_present():
    assert cases.get("depthwise3x3.n32").groups == 144
    assert cases.get("grouped3x3.n32").groups == 32
    assert cases.get("dilated3x3.n8").dilation == (2, 2)
    assert cases.get("pointwise1x1.c2048.n8").c >= 1024


def test_quick_set_is_small_enough_for_a_cpu():
    quick = cases.select("quick")
    assert quick and all(c.flops < 5e7 for c in quick)
    assert {c.groups > 1 for c in quick} == {True, False}


def test_default_set_is_seeds_plus_resnet50_batch32():
    ids = [c.id for c in cases.select("default")]
    assert ids[:3] == ["seed.c64", "seed.c8", "seed.c4"] and len(ids) == 26
    assert all(i.startswith("seed.") or i.endswith(".n32") for i in ids)


def test_unknown_case_names_close_matches():
    with pytest.raises(cases.UnknownCase) as err:
        cases.get("seed.c46")
    assert "seed.c4" in str(err.value) and "unknown case" in str(err.value)


def test_select_keeps_order_without_repeats():
    got = [c.id for c in cases.select("seed.c8,seed,quick.seed")]
    assert got == ["seed.c8", "seed.c64", "seed.c4", "quick.seed"]
