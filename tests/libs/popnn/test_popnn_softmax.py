"""popnn softmax and log-softmax: stable and plain forms, in place, along the last
dimension of any rank, with large logits, half; their input gradients against the analytic
NumPy gradient and central finite differences; the non_linearity dispatch; bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula.libs import popnn
from tremula.libs.popnn import PopnnError


def _helpers():
    name = "tremula_tests_popnn_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("popnn_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
Rig = H.Rig
RNG = np.random.default_rng(5)


@pytest.mark.parametrize("shape", [(6, 11), (2, 3, 7), (13,), (5, 1)])
def test_softmax_and_log_softmax_forms(shape) -> None:
    rig = Rig()
    x = RNG.normal(0, 3, shape).astype(np.float32)
    t = rig.input(x)
    in_place = rig.input(x)
    log_in_place = rig.input(x)
    outs = [
        popnn.softmax(rig.graph, t, rig.prog),
        popnn.softmax(rig.graph, t, rig.prog, stable=False),
        popnn.log_softmax(rig.graph, t, rig.prog),
        popnn.softmax_in_place(rig.graph, in_place, rig.prog),
        popnn.log_softmax_in_place(rig.graph, log_in_place, rig.prog),
    ]
    stable, plain, log, inp, log_inp = rig.run(outs)
    want = H.softmax(x)
    for got in (stable, plain, inp):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    for got in (log, log_inp):
        np.testing.assert_allclose(got, H.log_softmax(x), rtol=1e-5, atol=2e-6)
    assert outs[0].shape == shape


def test_stable_forms_survive_large_logits_and_plain_softmax_overflows_as_poplibs() -> None:
    rig = Rig()
    x = np.array([[1e4, 1e4 - 1, -1e4, 0], [-3e4, -3e4 + 2, -3e4 + 1, -3e4]], np.float32)
    t = rig.input(x)
    s = popnn.non_linearity(rig.graph, "SOFTMAX_STABLE", t, rig.prog)
    ls = popnn.non_linearity(rig.graph, "LOG_SOFTMAX", t, rig.prog)
    plain = popnn.non_linearity(rig.graph, "SOFTMAX", t, rig.prog)
    got_s, got_ls, got_plain = rig.run([s, ls, plain])
    np.testing.assert_allclose(got_s, H.softmax(x), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(got_ls, H.log_softmax(x), rtol=1e-6, atol=1e-6)
    assert np.isfinite(got_ls).all() and np.isfinite(got_s).all()
    assert not np.isfinite(got_plain).all()  # exp(1e4) overflows: PopLibs' plain SOFTMAX


def test_half_softmax_and_log_softmax() -> None:
    rig = Rig()
    x = RNG.normal(0, 4, (9, 33)).astype(np.float16)
    t = rig.input(x)
    s, ls = rig.run(
        [popnn.softmax(rig.graph, t, rig.prog), popnn.log_softmax(rig.graph, t, rig.prog)]
    )
    assert s.dtype == np.float16 and ls.dtype == np.float16
    np.testing.assert_allclose(s, H.softmax(x), rtol=1e-2, atol=2e-3)
    np.testing.assert_allclose(ls, H.log_softmax(x), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("kind", ["SOFTMAX", "SOFTMAX_STABLE", "LOG_SOFTMAX"])
def test_gradients_match_analytic_and_finite_differences(kind: str) -> None:
    rig = Rig()
    x = RNG.standard_normal((4, 9))
    g = RNG.standard_normal((4, 9))
    tx, tg = rig.input(x.astype(np.float32)), rig.input(g.astype(np.float32))
    y = popnn.non_linearity(rig.graph, kind, tx, rig.prog)
    dx = popnn.non_linearity_input_gradient(rig.graph, kind, y, tg, rig.prog)
    _, got = rig.run([y, dx])
    f = H.log_softmax if kind == "LOG_SOFTMAX" else H.softmax
    grad = H.log_softmax_grad if kind == "LOG_SOFTMAX" else H.softmax_grad
    analytic = grad(f(x), g)
    fd = H.finite_diff(lambda z: float(np.sum(f(z) * g)), x)
    np.testing.assert_allclose(analytic, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got, analytic, rtol=1e-5, atol=1e-6)


def test_named_gradient_functions_and_half() -> None:
    rig = Rig()
    y = H.softmax(RNG.standard_normal((3, 8))).astype(np.float16)
    g = RNG.standard_normal((3, 8)).astype(np.float16)
    ty, tg = rig.input(y), rig.input(g)
    d1 = popnn.softmax_input_gradient(rig.graph, ty, tg, rig.prog)
    d2 = popnn.log_softmax_input_gradient(rig.graph, ty, tg, rig.prog)
    got1, got2 = rig.run([d1, d2])
    y64, g64 = y.astype(np.float64), g.astype(np.float64)
    np.testing.assert_allclose(got1, H.softmax_grad(y64, g64), rtol=2e-2, atol=5e-3)
    np.testing.assert_allclose(got2, H.log_softmax_grad(y64, g64), rtol=2e-2, atol=2e-2)


def test_bad_input() -> None:
    rig = Rig()
    g = rig.graph
    x = rig.input(np.ones((3, 4), np.float32))
    xi = rig.input(np.ones((3, 4), np.int32))
    y = rig.input(np.ones((3, 5), np.float32))
    empty = g.add_variable("float", (0, 4), "empty")
    before = H.graph_size(g)
    for call, text in [
        (lambda: popnn.softmax(g, xi, rig.prog), "float or half"),
        (lambda: popnn.softmax(g, empty, rig.prog), "no elements"),
        (lambda: popnn.log_softmax(g, "x", rig.prog), "must be a Tensor"),
        (lambda: popnn.softmax_input_gradient(g, x, y, rig.prog), r"out_grad .*\(3, 5\)"),
        (lambda: popnn.log_softmax_input_gradient(g, x, xi, rig.prog), "out_grad"),
    ]:
        with pytest.raises(PopnnError, match=text):
            call()
    assert H.graph_size(g) == before
