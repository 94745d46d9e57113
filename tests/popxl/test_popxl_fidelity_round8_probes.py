"""Probe round 8, the areas round 7 did not reach, written the way PopXL's per-op tests are
(one session per case, torch or NumPy for the expected values). Tremula agreed on each;
they stay as tests so that it keeps agreeing: pooling (ceil mode, dilations, asymmetric
and automatic pads, 1-D and 3-D) and its gradients, convolutions with groups, dilations and
asymmetric pads and their gradients, group / layer norm and their gradients, NLL losses
over label dtypes with ``ignore_index`` and each reduction, ``interpolate`` against torch,
``topk`` / ``argmax`` / ``argmin`` ties, the random ops' properties, ``increment_mod``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as tf
from tremula_tests_evaluator import fetch, gradients, torch_grads, values

import popxl
import popxl.ops as ops

F32 = np.float32
RNG = np.random.default_rng(808)
X = RNG.standard_normal((2, 4, 7, 6)).astype(F32)


def torch_pads(pads: Sequence[int]) -> tuple[int, ...]:
    """ONNX pads ``[h_begin, w_begin, h_end, w_end]`` as ``torch.nn.functional.pad``'s."""
    return (pads[1], pads[3], pads[0], pads[2])


# ---- pooling ----

#: kernel, strides, ONNX pads, dilations, ceil mode
POOLS = [
    ((3, 3), (1, 1), (0, 0, 0, 0), (1, 1), False),
    ((3, 2), (2, 2), (1, 0, 1, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((2, 2), (2, 3), (0, 0, 0, 0), (1, 1), True),
    ((2, 2), (1, 1), (0, 1, 1, 0), (1, 1), False),
    ((2, 2), (1, 1), (0, 0, 0, 0), (2, 2), False),
]


@pytest.mark.parametrize("kernel, strides, pads, dilations, ceil", POOLS)
def test_max_pool_agrees_with_torch(kernel, strides, pads, dilations, ceil) -> None:
    (got,) = values(
        lambda t: ops.max_pool(t, kernel, strides, list(pads), dilation=list(dilations),
                               ceil_mode=ceil), X)  # fmt: skip
    padded = tf.pad(torch.tensor(X), torch_pads(pads), value=-np.inf)
    want = tf.max_pool2d(padded, kernel, strides, dilation=dilations, ceil_mode=ceil)
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("kernel, strides, pads, dilations, ceil", POOLS[:4])
def test_average_pool_leaves_padding_out_of_the_count_as_torch(
    kernel, strides, pads, dilations, ceil
) -> None:
    (got,) = values(lambda t: ops.average_pool(t, kernel, strides, list(pads), ceil_mode=ceil), X)
    p = (pads[0], pads[1])  # symmetric here
    want = tf.avg_pool2d(torch.tensor(X), kernel, strides, p, ceil, count_include_pad=False)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("auto_pad, torch_pad", [("same_upper", (0, 0, 0, 1)),
                                                 ("same_lower", (0, 0, 1, 0))])  # fmt: skip
def test_max_pool_auto_pad_puts_the_odd_pad_at_the_end_or_the_start(auto_pad, torch_pad) -> None:
    # 7 x 6 in windows of 2 by strides of 2: 4 x 3 out, one pad row, no pad column
    (got,) = values(lambda t: ops.max_pool(t, (2, 2), (2, 2), auto_pad=auto_pad), X)
    want = tf.max_pool2d(tf.pad(torch.tensor(X), torch_pad, value=-np.inf), 2, 2)
    np.testing.assert_array_equal(got, want.numpy())


def test_pools_of_one_and_three_spatial_axes() -> None:
    x1, x3 = X[:, :, :, 0], np.repeat(X[:, :, None], 3, axis=2)
    got1, got3 = values(
        lambda a, b: [ops.max_pool(a, (3,), (2,)), ops.average_pool(b, (2, 2, 2), (1, 1, 1))],
        x1, x3,
    )  # fmt: skip
    np.testing.assert_array_equal(got1, tf.max_pool1d(torch.tensor(x1), 3, 2).numpy())
    want3 = tf.avg_pool3d(torch.tensor(x3), 2, 1).numpy()
    np.testing.assert_allclose(got3, want3, rtol=1e-5, atol=1e-6)


def test_pool_gradients_agree_with_torch() -> None:
    x = X[:, :, :6, :]
    seed_max = RNG.standard_normal((2, 4, 3, 3)).astype(F32)
    (got,) = gradients(lambda t: ops.max_pool(t, (2, 2), (2, 2)), [x], seed_max)
    want = torch_grads(lambda t: tf.max_pool2d(t, 2, 2), [x], seed_max)
    np.testing.assert_allclose(got, want[0], rtol=1e-6)
    seed_avg = RNG.standard_normal((2, 4, 4, 3)).astype(F32)
    (got,) = gradients(lambda t: ops.average_pool(t, (3, 3), (2, 2), [1, 1, 1, 1]), [X], seed_avg)
    want = torch_grads(lambda t: tf.avg_pool2d(t, 3, 2, 1, count_include_pad=False), [X], seed_avg)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-6)


# ---- convolution ----

#: out channels, groups, kernel, strides, ONNX pads, dilations
CONVS = [
    (6, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (4, 4, (3, 2), (2, 1), (0, 1, 2, 0), (1, 2)),
    (2, 2, (2, 2), (2, 2), (1, 0, 0, 1), (2, 1)),
]


@pytest.mark.parametrize("c_out, groups, kernel, strides, pads, dilations", CONVS)
def test_conv_and_its_gradients_agree_with_torch(c_out, groups, kernel, strides, pads,
                                                 dilations) -> None:  # fmt: skip
    w = RNG.standard_normal((c_out, 4 // groups, *kernel)).astype(F32)

    def theirs(t: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return tf.conv2d(tf.pad(t, torch_pads(pads)), k, None, strides, 0, dilations, groups)

    def ours(t: popxl.Tensor, k: popxl.Tensor) -> popxl.Tensor:
        return ops.conv(t, k, strides, list(pads), dilations, groups)

    want = theirs(torch.tensor(X), torch.tensor(w)).numpy()
    (got,) = values(ours, X, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    seed = RNG.standard_normal(want.shape).astype(F32)
    for g, e in zip(gradients(ours, [X, w], seed), torch_grads(theirs, [X, w], seed)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


# ---- normalisation ----


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_and_its_gradients_agree_with_torch(groups: int) -> None:
    x = RNG.standard_normal((2, 6, 3, 2)).astype(F32)
    w, b = RNG.uniform(0.5, 1.5, 6).astype(F32), RNG.standard_normal(6).astype(F32)
    want = tf.group_norm(torch.tensor(x), groups, torch.tensor(w), torch.tensor(b), 1e-5)
    (got,) = values(lambda t, s, o: ops.group_norm(t, s, o, groups, 1e-5), x, w, b)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
    seed = RNG.standard_normal(x.shape).astype(F32)
    got_g = gradients(lambda t, s, o: ops.group_norm(t, s, o, groups, 1e-5), [x, w, b], seed)
    want_g = torch_grads(lambda t, s, o: tf.group_norm(t, groups, s, o, 1e-5), [x, w, b], seed)
    for g, e in zip(got_g, want_g):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4)


def test_layer_norm_of_a_matrix_normalises_each_row_as_torch() -> None:
    x = RNG.standard_normal((3, 5)).astype(F32)
    w, b = RNG.uniform(0.5, 1.5, 5).astype(F32), RNG.standard_normal(5).astype(F32)
    (got,) = values(lambda t, s, o: ops.layer_norm(t, s, o), x, w, b)
    want = tf.layer_norm(torch.tensor(x), (5,), torch.tensor(w), torch.tensor(b))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


# ---- NLL losses ----

LABELS = np.array([1, 0, 4, 2])


def _probs(shape: tuple[int, ...]) -> np.ndarray:
    return torch.softmax(torch.tensor(RNG.standard_normal(shape).astype(F32)), -1).numpy()


@pytest.mark.parametrize("label_type", [np.int32, np.uint32, np.int8, np.int16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_nll_loss_agrees_with_torch(label_type: type, reduction: str, ignore_index) -> None:
    p = _probs((4, 5))
    (got,) = values(lambda q, lab: ops.nll_loss(q, lab, ignore_index, reduction), p,
                    LABELS.astype(label_type))  # fmt: skip
    want = tf.nll_loss(torch.log(torch.tensor(p)), torch.tensor(LABELS), reduction=reduction,
                       ignore_index=-100 if ignore_index is None else ignore_index)  # fmt: skip
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_nll_loss_with_softmax_grad_is_torch_cross_entropy_and_its_gradient(
    reduction: str, ignore_index
) -> None:
    logits = RNG.standard_normal((4, 5)).astype(F32)
    p = torch.softmax(torch.tensor(logits), -1).numpy()
    lt = torch.tensor(logits, requires_grad=True)
    ignored = -100 if ignore_index is None else ignore_index
    loss = tf.cross_entropy(lt, torch.tensor(LABELS), reduction=reduction, ignore_index=ignored)
    (loss.sum() * 3.0).backward()
    got_loss, got_grad = values(
        lambda q, lab, g: ops.nll_loss_with_softmax_grad(q, lab, g, ignore_index, reduction),
        p, LABELS.astype(np.int32), np.array(3.0, F32),
    )  # fmt: skip
    np.testing.assert_allclose(got_loss, loss.detach().numpy(), rtol=1e-5)
    assert lt.grad is not None
    np.testing.assert_allclose(got_grad, lt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_nll_loss_of_a_rank_3_probability_tensor_flattens_the_samples() -> None:
    p = _probs((2, 3, 5))
    labels = np.array([[0, 1, 4], [2, 2, 3]])
    got_mean, got_none = values(
        lambda q, lab: [ops.nll_loss(q, lab, 1, "mean"), ops.nll_loss(q, lab, None, "none")],
        p, labels.astype(np.int32),
    )  # fmt: skip
    logp, lab = torch.log(torch.tensor(p)).reshape(6, 5), torch.tensor(labels).reshape(6)
    np.testing.assert_allclose(got_mean, tf.nll_loss(logp, lab, ignore_index=1).numpy(), rtol=1e-5)
    want_none = tf.nll_loss(logp, lab, reduction="none").numpy().reshape(2, 3)
    np.testing.assert_allclose(got_none, want_none, rtol=1e-5)


# ---- interpolate ----


@pytest.mark.parametrize("scale", [(2.0, 2.0), (0.5, 0.6), (1.5, 2.5)])
@pytest.mark.parametrize(
    "mode, nearest_mode, coordinates, torch_mode, align_corners",
    [
        ("nearest", "floor", "asymmetric", "nearest", None),
        ("linear", "round_prefer_floor", "half_pixel", "bilinear", False),
        ("linear", "round_prefer_floor", "align_corners", "bilinear", True),
        ("cubic", "round_prefer_floor", "half_pixel", "bicubic", False),
    ],
)
def test_interpolate_agrees_with_torch(
    scale, mode, nearest_mode, coordinates, torch_mode, align_corners
) -> None:
    x = X[:1, :2, :4, :5]
    (got,) = values(
        lambda t: ops.interpolate(t, (1.0, 1.0, *scale), mode, nearest_mode, coordinates), x
    )
    want = tf.interpolate(torch.tensor(x), scale_factor=scale, mode=torch_mode,
                          align_corners=align_corners)  # fmt: skip
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-3, atol=1e-4)


# ---- topk, argmax, argmin ----

TIED = np.array([[1, 3, 3, 2, 3], [0, 0, -1, -1, 5]], F32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_argmax_and_argmin_take_the_first_of_ties_as_int32(dtype: type) -> None:
    x = TIED.astype(dtype)
    got_max, got_min, got_keep = values(
        lambda t: [ops.argmax(t, 1), ops.argmin(t, 1), ops.argmax(t, 0, keepdim=True)], x
    )
    assert got_max.dtype == got_min.dtype == got_keep.dtype == np.int32
    np.testing.assert_array_equal(got_max, [1, 4])  # np.argmax: the first maximum
    np.testing.assert_array_equal(got_min, np.argmin(x, 1))
    np.testing.assert_array_equal(got_keep, np.argmax(x, 0)[None])


@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties_come_in_index_order_and_agree_with_torch(largest: bool) -> None:
    got_values, got_indices = values(lambda t: ops.topk(t, 3, axis=1, largest=largest), TIED)
    want = torch.topk(torch.tensor(TIED), 3, dim=1, largest=largest, sorted=True)
    np.testing.assert_array_equal(got_values, want.values.numpy())
    assert got_indices.dtype == np.int32
    order = np.argsort(-TIED if largest else TIED, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(got_indices, order)


def test_topk_gradient_goes_to_the_indices_it_returns() -> None:
    seed = np.array([[1, 10], [100, 1000]], F32)
    (got,) = gradients(lambda t: ops.topk(t, 2, axis=1)[0], [TIED], seed)
    np.testing.assert_array_equal(got, [[0, 1, 10, 0, 0], [1000, 0, 0, 0, 100]])


# ---- random ops ----

SEED = np.array([1, 2], np.uint32)


def test_random_normal_and_uniform_shapes_dtypes_and_moments() -> None:
    normal, uniform, half = values(
        lambda s: [
            ops.random_normal(s, (4000,), 1.0, 2.0),
            ops.random_uniform(s, (4000,), -2.0, 3.0),
            ops.random_normal(s, (2, 3), dtype=popxl.float16),
        ],
        SEED,
    )
    assert normal.dtype == uniform.dtype == np.float32 and half.dtype == np.float16
    assert half.shape == (2, 3)
    assert abs(normal.mean() - 1.0) < 0.15 and abs(normal.std() - 2.0) < 0.15
    assert uniform.min() >= -2.0 and uniform.max() < 3.0 and abs(uniform.mean() - 0.5) < 0.1


def test_random_ops_repeat_for_one_seed_value() -> None:
    first, second = values(
        lambda s: [ops.random_uniform(s, (16,)), ops.random_uniform(s, (16,))], SEED
    )
    (again,) = values(lambda s: ops.random_uniform(s, (16,)), SEED)
    (other,) = values(lambda s: ops.random_uniform(s, (16,)), SEED + 1)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_dropout_scales_the_kept_elements_and_its_gradient_uses_the_same_mask() -> None:
    x = np.ones(4000, F32)
    (out,) = values(lambda t, s: ops.dropout(t, s, 0.25), x, SEED)
    np.testing.assert_allclose(np.unique(out), [0, 1 / 0.75], rtol=1e-6)
    assert abs((out == 0).mean() - 0.25) < 0.03
    ir = popxl.Ir()
    with ir.main_graph:
        t, s = popxl.variable(x), popxl.variable(SEED)
        graph = ir.create_graph(lambda a, b: ops.dropout(a, b, 0.25), t.spec, s.spec)
        info = popxl.transforms.autodiff(graph, grads_required=[graph.inputs[0]])
        site = ops.call_with_info(graph, t, s)
        (grad,) = ops.call(info.graph, popxl.constant(x), inputs_dict=info.inputs_dict(site))
    got_grad, got_fwd = fetch(ir, grad, site.outputs[0])
    np.testing.assert_array_equal(got_grad, got_fwd)  # x is ones: the forward is the mask
    assert 0 < (got_fwd == 0).sum() < x.size


@pytest.mark.parametrize("ratio", [1.0, -0.1])
def test_dropout_ratio_outside_zero_to_one_is_refused(ratio: float) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t, s = popxl.variable(np.ones(4, F32)), popxl.variable(SEED)
        with pytest.raises(ValueError, match="drop probability must lie in"):
            ops.dropout(t, s, ratio)


def test_shaped_dropout_drops_whole_rows_of_its_broadcast_mask() -> None:
    (out,) = values(lambda t, s: ops.shaped_dropout(t, s, [8, 1], 0.5), np.ones((8, 6), F32), SEED)
    for row in out:
        assert set(np.unique(row)) <= {0.0, 2.0} and len(np.unique(row)) == 1


# ---- integer ops ----


def test_increment_mod_is_c_remainder_of_the_sum() -> None:
    a = np.array([5, -3, 7, 0, -5], np.int32)
    f = np.array([1.7, -0.2, 3.0], F32)
    got_int, got_float = values(
        lambda p, q: [ops.increment_mod(p, 3, 4), ops.increment_mod(q, 0.5, 2.0)], a, f
    )
    np.testing.assert_array_equal(got_int, np.fmod(a + 3, 4))
    np.testing.assert_allclose(got_float, np.fmod(f + 0.5, 2.0), rtol=1e-6)


def test_histogram_counts_below_between_and_from_each_level() -> None:
    (got,) = values(lambda t: ops.histogram(t, levels=[0.0, 2.0, 3.0]), TIED)
    assert got.dtype == np.uint32
    # < 0: -1 -1; [0, 2): 1 0 0; [2, 3): 2; >= 3: 3 3 3 5
    np.testing.assert_array_equal(got, [2, 3, 1, 4])


@pytest.mark.parametrize(
    "make",
    [
        lambda s, x: ops.random_normal(s, 3),
        lambda s, x: ops.random_uniform(s, (2, 1.5)),
        lambda s, x: ops.shaped_dropout(x, s, 2, 0.5),
    ],
)
def test_random_op_shape_that_is_not_ints_is_a_type_error_naming_the_shape(make) -> None:
    """Was a bare "'int' object is not iterable" (or a float silently truncated)."""
    ir = popxl.Ir()
    with ir.main_graph:
        seed, x = popxl.variable(SEED), popxl.variable(np.ones((2, 2), F32))
        n = len(ir.main_graph.tensors)
        with pytest.raises(TypeError, match="shape must be a sequence of ints"):
            make(seed, x)
        assert len(ir.main_graph.tensors) == n
