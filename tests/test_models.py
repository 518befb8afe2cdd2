"""The model builders: torchvision's architectures, deterministic bytes, real-image inputs, agreement with ORT."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from harness.backends.ort import architectures, imagenet, models  # noqa: E402
from harness.core import cases  # noqa: E402
from harness.measurement import accuracy  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def mbv2(cache):
    built = models.build("mobilenetv2", 1, cache)
    return built, models.load_params(built.path)


def n_trainable(params: dict[str, np.ndarray]) -> int:
    return sum(v.size for k, v in params.items() if not k.endswith(("running_mean", "running_var")))


def test_resnet50_has_torchvisions_layers_and_parameter_count(cache):
    built = models.build("resnet50", 1, cache)
    params = models.load_params(built.path)
    # torchvision.models.resnet50() has 25,557,032 parameters and 53 convolutions
    assert n_trainable(params) == 25_557_032
    assert len(built.conv_nodes) == 53
    assert built.conv_nodes[0] == "conv1" and "layer4.2.conv3" in built.conv_nodes
    assert params["layer3.0.downsample.0.weight"].shape == (1024, 512, 1, 1)


def test_mobilenetv2_has_torchvisions_layers_and_parameter_count(mbv2):
    built, params = mbv2
    assert n_trainable(params) == 3_504_872  # torchvision.models.mobilenet_v2()
    assert len(built.conv_nodes) == 52
    dw = params["features.2.conv.1.0.weight"]
    assert dw.shape == (96, 1, 3, 3)  # depthwise: one input channel per group


def test_build_is_bitwise_reproducible(tmp_path, mbv2):
    again = models.build("mobilenetv2", 1, tmp_path)
    assert again.sha256 == mbv2[0].sha256


def test_bn_statistics_sit_on_the_quantisation_grid(mbv2):
    _, params = mbv2
    var = params["features.5.conv.1.1.running_var"].astype(np.float64)
    k = np.log2(var) * 4
    assert np.allclose(k, np.round(k), atol=1e-4)


@pytest.mark.parametrize("name", ["image", "random"])
def test_onnxruntime_cpu_agrees_with_the_float64_reference(mbv2, name):
    built, params = mbv2
    x = imagenet.model_inputs("mobilenetv2", 1)[name]
    ref, source = models.reference("mobilenetv2", params, x)
    yard = models.fp32_yardstick("mobilenetv2", params, x, ref)
    sess = ort.InferenceSession(str(built.path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {models.INPUT: x})[0].astype(np.float64)
    rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert 0 < yard < 1e-4
    assert rel < 8 * yard, (rel, yard, source)
    assert y.argmax() == ref.argmax()


def test_reference_is_float64_of_a_sane_network(mbv2):
    _, params = mbv2
    x = imagenet.model_inputs("mobilenetv2", 1)["image"]
    ref, _ = models.reference("mobilenetv2", params, x, source="builder")
    assert ref.dtype == np.float64 and ref.shape == (1, 1000)
    assert 0.01 < ref.std() < 100  # calibrated BN keeps activations O(1) through the network


def test_torchvision_module_matches_the_builder_where_torchvision_imports(mbv2):
    _, params = mbv2
    if models.torchvision_module("mobilenetv2", params) is None:
        pytest.skip("torchvision does not import beside this torch")
    x = imagenet.model_inputs("mobilenetv2", 1)["image"]
    a, src = models.reference("mobilenetv2", params, x, source="torchvision")
    b, _ = models.reference("mobilenetv2", params, x, source="builder")
    assert src.startswith("torchvision")
    assert np.abs(a - b).max() <= 1e-9 * np.abs(b).max()


def test_torch_state_copies_the_read_only_initializers_without_a_warning(mbv2):
    import warnings

    _, params = mbv2
    name = "features.0.0.weight"
    assert not params[name].flags.writeable  # onnx's numpy_helper view: what made torch warn on the H200
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = models.torch_state(params)
    assert set(state) == set(params)
    assert np.array_equal(state[name].numpy(), params[name]) and state[name].numpy().flags.writeable


def test_preprocessing_of_a_flat_grey_image_is_exact():
    img = np.full((300, 400, 3), 128, dtype=np.uint8)
    x = imagenet.imagenet_preprocess(img)
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    for c in range(3):
        want = (np.float32(128) / np.float32(255) - np.float32(imagenet.IMAGENET_MEAN[c])) / np.float32(
            imagenet.IMAGENET_STD[c])
        assert np.all(x[c] == want)


# The input hash of model.* records in the H200 fixtures (tests/fixtures/runs/h200-ort*.tar.gz), batch 1,
# made when the photographs were read from scikit-image at run time.
H200_IMAGE_INPUT_HASH = "8f41cc527f13c8bd12b7ca916a20fb8a"


def test_shipped_real_image_input_is_the_bits_the_h200_fixtures_used():
    """The package's sample crops give the very input the H200 runs hashed, with no scikit-image at all."""
    import torch

    for model_id in architectures.MODELS:
        x = imagenet.model_inputs(model_id, 1)["image"]
        assert accuracy.output_hash(torch.from_numpy(x)) == H200_IMAGE_INPUT_HASH


def test_shipped_crops_equal_scikit_images_photographs():
    """Every shipped crop, not only the first: recomputed from scikit-image's photographs, bit for bit."""
    data = pytest.importorskip("skimage.data", reason="scikit-image (the test extra) holds the originals")
    crops = imagenet.sample_crops()
    for name in imagenet.SAMPLE_IMAGES:
        assert crops[name].dtype == np.uint8 and crops[name].shape == (224, 224, 3)
        assert np.array_equal(crops[name], imagenet.imagenet_crop(getattr(data, name)())), name
    x = imagenet.model_inputs("resnet50", 3)["image"]
    for i, name in enumerate(imagenet.SAMPLE_IMAGES):
        assert np.array_equal(x[i], imagenet.imagenet_preprocess(getattr(data, name)()))


def test_real_images_are_the_shipped_photographs_cycled():
    x = imagenet.model_inputs("resnet50", 4)
    assert x["image"].shape == (4, 3, 224, 224)
    assert np.array_equal(x["image"][0], x["image"][3])  # three photographs, cycled
    assert not np.array_equal(x["image"][0], x["image"][1])
    assert abs(float(x["random"].std()) - 1) < 0.01


def test_resample_rows_are_normalised():
    m = imagenet._resample_matrix(512, 256)
    assert np.allclose(m.sum(axis=1), 1) and (m >= 0).all()


def test_unknown_model_is_a_clear_error():
    with pytest.raises(architectures.UnknownModel, match="known: resnet50, mobilenetv2"):
        architectures.check_model("resnet18")


@pytest.mark.parametrize("case_id", ["quick.stem7x7", "quick.grouped", "quick.dilated"])
def test_single_conv_model_matches_the_catalogue_reference(tmp_path, case_id):
    import torch

    case = cases.get(case_id)
    path, _ = models.build_conv_case(case, "fp32", tmp_path)
    host = accuracy.host_inputs(case)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": host["x"]})[0]
    assert y.shape == case.y_shape()
    ref, scale = accuracy.reference(case, "fwd", {k: torch.from_numpy(v) for k, v in host.items()}, "cpu")
    acc = accuracy.measure(torch.from_numpy(y), ref, scale, "fp32")
    assert acc.precision_class == "fp32", acc
