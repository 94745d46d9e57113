"""popnn non-linearities: every element-wise type forward, in place and its gradient
against float64 NumPy references (float and half), the references against central finite
differences, odd sizes and mappings, the estimator's shape, and bad input."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import popnn, util
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
ELEMENTWISE = list(H.NONLINEARITIES)
RNG = np.random.default_rng(11)


def _data(shape, dtype=np.float32) -> np.ndarray:
    x = RNG.uniform(-4, 4, shape)
    # keep away from the kinks of RELU (0) and HARD_SIGMOID (+-2.5) for finite differences
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    x = np.where(np.abs(np.abs(x) - 2.5) < 0.05, 1.0, x)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "half"])
@pytest.mark.parametrize("nl", ELEMENTWISE)
def test_forward_in_place_and_gradient_match_numpy(nl: str, dtype) -> None:
    rig = Rig()
    x, g = _data((7, 13), dtype), RNG.standard_normal((7, 13)).astype(dtype)
    tx, tg = rig.input(x), rig.input(g)
    y = popnn.non_linearity(rig.graph, nl, tx, rig.prog)
    t_in = rig.input(x)
    popnn.non_linearity_in_place(rig.graph, popnn.NonLinearityType[nl], t_in, rig.prog)
    act = tx if nl in H.FROM_INPUT else y
    dx = popnn.non_linearity_input_gradient(rig.graph, nl, act, tg, rig.prog)
    got_y, got_in, got_dx = rig.run([y, t_in, dx])
    f, df = H.NONLINEARITIES[nl]
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=4e-3, atol=4e-3)
    np.testing.assert_allclose(got_y, f(x64), **tol)
    np.testing.assert_array_equal(got_in, got_y)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got_dx, g64 * df(x64), **tol)
    assert got_y.dtype == dtype and got_dx.dtype == dtype


@pytest.mark.parametrize("nl", ELEMENTWISE)
def test_reference_derivatives_match_finite_differences(nl: str) -> None:
    f, df = H.NONLINEARITIES[nl]
    x = _data((40,), np.float64)
    g = RNG.standard_normal(40)
    fd = H.finite_diff(lambda z: float(np.sum(f(z) * g)), x)
    np.testing.assert_allclose(g * df(x), fd, rtol=1e-6, atol=1e-7)


def test_gradient_conventions_follow_poplibs() -> None:
    """SIGMOID / RELU / TANH from the output; GELU, GELU_ERF, SWISH, HARD_SIGMOID from the
    input: feeding the other one gives a different answer."""
    from tremula.libs.popnn.nonlinearity_table import TABLE

    sources = {t.name: r.grad_from for t, r in TABLE.items()}
    assert sources == {n: ("input" if n in H.FROM_INPUT else "output") for n in ELEMENTWISE}


def test_odd_mappings_views_and_names() -> None:
    rig = Rig(tiles=16)
    x = _data((5, 9))
    scattered = RNG.integers(0, 16, (5, 9))
    tx = rig.input(x, mapping=scattered)
    one_tile = rig.input(x.T.copy(), mapping=3)
    y = popnn.non_linearity(rig.graph, "sigmoid", tx.transpose(), rig.prog, name="sig")
    popnn.non_linearity_in_place(rig.graph, "TANH", one_tile.transpose(), rig.prog)
    got_y, got_t = rig.run([y, one_tile])
    np.testing.assert_allclose(got_y, H.sigmoid(x.T.astype(np.float64)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got_t, np.tanh(x.T.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert y.shape == (9, 5)
    assert np.array_equal(rig.graph.tiles_of(y), rig.graph.tiles_of(tx.transpose()))


def test_one_element_and_empty_tensors() -> None:
    rig = Rig()
    t = rig.input(np.array([-2.0], np.float32))
    y = popnn.non_linearity(rig.graph, "RELU", t, rig.prog)
    empty = rig.graph.add_variable(poplar.FLOAT, (0, 3), "empty")
    before = len(rig.graph.state.compute_sets)
    out = popnn.non_linearity(rig.graph, "GELU", empty, rig.prog)
    assert out.shape == (0, 3) and len(rig.graph.state.compute_sets) == before
    (got,) = rig.run([y])
    assert got.tolist() == [0.0]


@pytest.mark.parametrize(
    ("nl", "dtype", "cpv", "grad"),
    [("TANH", poplar.FLOAT, 12, False), ("SIGMOID", poplar.HALF, 6, False),
     ("GELU", poplar.FLOAT, 36, True), ("RELU", poplar.HALF, 3, True)],
)  # fmt: skip
@pytest.mark.parametrize("n", [3, 250])
def test_estimates_follow_the_worker_shape(nl, dtype, cpv, grad, n) -> None:
    """Per vertex: ``20 + ceil(n / vw) (cpv + 4)`` forward, ``29 + ceil(n / vw) (cpv + 5)``
    gradient; tile cycles 6 x the busiest worker plus the compute-set launch."""
    rig = Rig()
    x = rig.input(np.ones(n), dtype, mapping=0)
    vw = rig.graph.target.vector_width(dtype.size)
    if grad:
        g = rig.input(np.ones(n), dtype, mapping=0)
        out = popnn.non_linearity_input_gradient(rig.graph, nl, x, g, rig.prog, name="nl")
        formula = lambda k: 29 + math.ceil(k / vw) * (cpv + 5)  # noqa: E731
    else:
        out = popnn.non_linearity_in_place(rig.graph, nl, x, rig.prog, name="nl")
        formula = lambda k: 20 + math.ceil(k / vw) * (cpv + 4)  # noqa: E731
    lengths = util.partition(rig.graph, out, vw).lengths
    rig.run([])
    by_tile, by_type = H.cs_estimates(rig.engine, "nl/")
    ((vtype, active),) = by_type.items()
    kind = "NonLinearityGrad1D" if grad else "NonLinearity1D"
    assert vtype == f"popnn::{kind}<{dtype.name},{nl}>"
    per_vertex = [formula(int(k)) for k in lengths]
    assert active == sum(per_vertex)
    launch = rig.graph.target.compute_set_launch_cycles
    assert by_tile[0] == 6 * max(per_vertex) + launch and not by_tile[1:].any()


def test_bad_input_names_the_operand_and_leaves_the_graph_alone() -> None:
    rig = Rig()
    g = rig.graph
    x = rig.input(np.ones((3, 4), np.float32))
    xi = rig.input(np.ones((3, 4), np.int32))
    xh = rig.input(np.ones((3, 4), np.float16))
    y = rig.input(np.ones((4, 3), np.float32))
    unmapped = g.add_variable(poplar.FLOAT, (3, 4), "unmapped")
    before = H.graph_size(g)
    cases = [
        (lambda: popnn.non_linearity(g, "LEAKY", x, rig.prog), "LEAKY"),
        (lambda: popnn.non_linearity(g, "RELU", xi, rig.prog), "float or half"),
        (lambda: popnn.non_linearity(g, "RELU", unmapped, rig.prog), "not completely mapped"),
        (lambda: popnn.non_linearity(g, "RELU", np.ones(3), rig.prog), "must be a Tensor"),
        (lambda: popnn.non_linearity_input_gradient(g, "TANH", x, y, rig.prog), "out_grad"),
        (lambda: popnn.non_linearity_input_gradient(g, "TANH", x, xh, rig.prog), "out_grad"),
        (lambda: popnn.non_linearity_input_gradient(g, "TANH", xi, x, rig.prog), "act"),
        (
            lambda: popnn.non_linearity_in_place(g, "RELU", x[0].broadcast(3, 0), rig.prog),
            "aliased",
        ),
    ]
    for call, text in cases:
        with pytest.raises(PopnnError, match=text):
            call()
    assert H.graph_size(g) == before
