"""NN ops (popxl/ops/nn.py) through a Session against NumPy: softmax, the NLL losses,
group / layer norm, batch-norm inference."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(11)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis):
    x = RNG.normal(size=(3, 4, 5)).astype(np.float32)
    check(lambda t: ops.softmax(t, axis), _softmax(x.astype(np.float64), axis), x)


def test_softmax_half_and_errors():
    x = RNG.normal(size=(4, 6)).astype(np.float16)
    check(lambda t: ops.softmax(t, 1), _softmax(x.astype(np.float64), 1), x, rtol=3e-3, atol=1e-3)
    with pytest.raises(TypeError, match="float16 or float32"):
        run(lambda t: ops.softmax(t, 0), np.ones(3, np.int32))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        run(lambda t: ops.softmax(t, 2), x)


def _nll(p, labels, reduction, ignore=None, log_prob=False):
    rows, lab = p.reshape(-1, p.shape[-1]).astype(np.float64), labels.reshape(-1)
    kept = lab != ignore if ignore is not None else np.ones(lab.shape, bool)
    picked = rows[np.arange(lab.size), np.where(kept, lab, 0)]
    per = np.where(kept, -(picked if log_prob else np.log(picked)), 0.0)
    if reduction == "none":
        return per.reshape(labels.shape)
    return per.sum() if reduction == "sum" else per.sum() / kept.sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    p = _softmax(RNG.normal(size=(2, 3, 5)), -1).astype(np.float32)
    labels = RNG.integers(0, 5, (2, 3)).astype(np.int32)
    check(
        lambda a, b: ops.nll_loss(a, b, reduction=reduction), _nll(p, labels, reduction), p, labels
    )
    labels[0, 1] = 2
    want = _nll(p, labels, reduction, ignore=2)
    check(lambda a, b: ops.nll_loss(a, b, ignore_index=2, reduction=reduction), want, p, labels)
    lp = np.log(p)
    want = _nll(lp, labels, reduction, log_prob=True)
    check(lambda a, b: ops.nll_loss(a, b, reduction=reduction, log_prob=True), want, lp, labels)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore", [None, 1])
def test_nll_loss_with_softmax_grad(reduction, ignore):
    p = _softmax(RNG.normal(size=(6, 4)), -1).astype(np.float32)
    labels = RNG.integers(0, 4, (6,)).astype(np.uint32)
    labels[2] = 1
    kept = labels != ignore if ignore is not None else np.ones(6, bool)
    onehot = np.eye(4)[labels]
    scale = 0.5 / (kept.sum() if reduction == "mean" else 1)
    dx = np.where(kept[:, None], (p - onehot) * scale, 0.0)
    want = [_nll(p, labels, reduction, ignore), dx]

    def build(a, b):
        return ops.nll_loss_with_softmax_grad(
            a, b, loss_grad=0.5, ignore_index=ignore, reduction=reduction
        )

    check(build, want, p, labels)

    def build_tensor_grad(a, b):  # loss_grad as a tensor computed on the device
        g = ops.mul(popxl.constant(0.25, popxl.float32), popxl.constant(2.0, popxl.float32))
        return ops.nll_loss_with_softmax_grad(a, b, g, ignore_index=ignore, reduction=reduction)

    check(build_tensor_grad, want, p, labels)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_labels_in_another_shape(reduction):
    """One label per row of the probabilities in any shape (PopART flattens both): labels
    [2, 3] for probabilities [6, 5] (BERT's masked-LM loss); a "none" loss has the labels'
    shape; the gradient has the probabilities'."""
    x = RNG.normal(size=(6, 5))
    p = _softmax(x, -1).astype(np.float32)
    labels = RNG.integers(0, 5, (2, 3)).astype(np.int32)
    labels[1, 2] = 0
    want = _nll(p, labels, reduction, ignore=0)
    check(lambda a, b: ops.nll_loss(a, b, ignore_index=0, reduction=reduction), want, p, labels)
    if reduction == "none":
        return
    kept = labels.reshape(-1) != 0
    scale = 1 / (kept.sum() if reduction == "mean" else 1)
    dx = np.where(kept[:, None], (p - np.eye(5)[labels.reshape(-1)]) * scale, 0.0)

    def build(a, b):
        return ops.nll_loss_with_softmax_grad(a, b, ignore_index=0, reduction=reduction)

    check(build, [want, dx], p, labels)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_nll_labels_of_any_integer_type(dtype):
    """PopART's NllOp takes labels of any fixed-point type (PopLibs' losses take 32-bit
    ones: the lowering casts), ignored labels and the loss gradient included."""
    p = _softmax(RNG.normal(size=(6, 4)), -1).astype(np.float32)
    labels = RNG.integers(0, 4, (6,)).astype(dtype)
    labels[3] = 2
    kept = labels != 2
    dx = np.where(kept[:, None], (p - np.eye(4)[labels]) / kept.sum(), 0.0)
    want = [_nll(p, labels, "mean", ignore=2), dx]
    check(lambda a, b: ops.nll_loss_with_softmax_grad(a, b, ignore_index=2), want, p, labels)
    check(lambda a, b: ops.nll_loss(a, b, reduction="sum"), _nll(p, labels, "sum"), p, labels)


def test_nll_errors():
    p = np.full((3, 4), 0.25, np.float32)
    with pytest.raises(TypeError, match="must be of an integer type"):
        run(lambda a, b: ops.nll_loss(a, b), p, np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="must be of an integer type"):
        run(lambda a, b: ops.nll_loss(a, b), p, np.zeros(3, bool))
    with pytest.raises(ValueError, match="one label per row"):
        run(lambda a, b: ops.nll_loss(a, b), p, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match=r"labels .* of shape \(2, 2\)"):
        run(lambda a, b: ops.nll_loss_with_softmax_grad(a, b), p, np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match="reduction"):
        run(lambda a, b: ops.nll_loss(a, b, reduction="avg"), p, np.zeros(3, np.int32))


def _group_norm(x, w, b, groups, eps):
    n, c = x.shape[:2]
    g = x.astype(np.float64).reshape(n, groups, -1)
    y = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    x = (RNG.normal(size=(2, 4, 3)) * 3 + 5).astype(np.float32)
    w, b = RNG.normal(size=4).astype(np.float32), RNG.normal(size=4).astype(np.float32)
    want = _group_norm(x, w, b, groups, 1e-5)
    check(lambda *t: ops.group_norm(*t, groups, 1e-5), want, x, w, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2])
def test_group_norm_half(groups):
    """float16 group norm (BERT's LayerNorm in half): statistics accumulate in float, the
    output is float16 and matches float64 NumPy."""
    x = (RNG.normal(size=(3, 8, 2)) * 2 + 30).astype(np.float16)
    w = RNG.uniform(0.5, 1.5, 8).astype(np.float16)
    b = RNG.normal(size=8).astype(np.float16)
    want = _group_norm(x, w.astype(np.float64), b.astype(np.float64), groups, 1e-5)
    got = check(lambda *t: ops.group_norm(*t, groups, 1e-5), want, x, w, b, rtol=0, atol=2e-2)
    assert got[0].dtype == np.float16


def test_layer_norm_and_errors():
    x = RNG.normal(size=(5, 8)).astype(np.float32)
    w, b = RNG.normal(size=8).astype(np.float32), RNG.normal(size=8).astype(np.float32)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-3) * w + b
    check(lambda *t: ops.layer_norm(*t, eps=1e-3), want, x, w, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="divide the 8 channels"):
        run(lambda *t: ops.group_norm(*t, 3), x, w, b)
    with pytest.raises(ValueError, match="one value per channel"):
        run(lambda *t: ops.group_norm(*t, 2), x, w[:4], b)


def test_batch_norm_inference():
    x = RNG.normal(size=(2, 3, 4, 2)).astype(np.float32)
    scale, bias, mean = (RNG.normal(size=3).astype(np.float32) for _ in range(3))
    var = RNG.uniform(0.5, 2, 3).astype(np.float32)
    s = (1, 3, 1, 1)
    want = (x - mean.reshape(s)) / np.sqrt(var.reshape(s) + 1e-5) * scale.reshape(s) + bias.reshape(
        s
    )
    check(lambda *t: ops.batch_norm_inference(*t), want, x, scale, bias, mean, var, rtol=1e-5)


def test_batch_norm_inference_refuses_autodiff():
    """PopART's BatchNormGradOp needs a training-mode batch norm's saved statistics, so
    autodiff through the inference form fails (it used to pass no gradient: everything
    upstream silently got zeros); the Ir is left as it was. A graph whose gradients do not
    pass through it is still differentiated."""
    from tremula.errors import PopartException

    ir = popxl.Ir()
    with ir.main_graph:
        specs = [popxl.TensorSpec((2, 3, 4, 4), popxl.float32)]
        specs += [popxl.TensorSpec((3,), popxl.float32)] * 4

        def frozen(x, *stats):
            return ops.batch_norm_inference(ops.relu(x), *stats)

        fwd = ir.create_graph(frozen, *specs)
        graphs = len(ir.graphs)
        with pytest.raises(PopartException, match=r"BatchNormOp .* in inference mode"):
            popxl.transforms.autodiff(fwd)
        assert len(ir.graphs) == graphs

        def beside(x, *stats):
            return ops.relu(x), ops.batch_norm_inference(x, *stats)

        both = ir.create_graph(beside, *specs)
        info = popxl.transforms.autodiff(both, grads_provided=[both.outputs[0]])
        assert len(info.graph.outputs) == 5
