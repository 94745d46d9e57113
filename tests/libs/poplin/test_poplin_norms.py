"""poplin's distributed norm statistics (PopLibs' ``distributedNormStatistics`` and its
gradients): each of two replicas holds half of every channel's elements; the reduce
callback (gcl's all-reduce over the replicas) joins them. Against float64 NumPy over the
two halves joined, in float and half, stable or not, biased or not, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import gcl, poplin

R, B, C = 2, 5, 3  # replicas, elements per replica of each channel, channels
EPS = 1e-3
RNG = np.random.default_rng(4)
X = RNG.normal(2.0, 3.0, (R, B, C))
G = RNG.normal(0.0, 1.0, (R, B, C))


def _callback(calls: list[int]):
    def all_reduce(graph, parts, prog, group_size, name):
        calls.append(len(parts))
        assert group_size == R
        return [gcl.all_reduce(graph, p, "add", prog, name=name) for p in parts]

    return all_reduce


def _input(s, data, dtype, name):
    t = s.graph.add_variable(dtype, data.shape[1:], name)
    poplar.map_tensor_linearly(s.graph, t)
    return t, data.astype(dtype.numpy)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize("stable, unbiased", [(False, False), (True, False), (False, True)])
def test_statistics_and_gradients_over_the_replicas(session, dtype, stable, unbiased) -> None:
    s = session(replicas=R)
    x, xv = _input(s, X, dtype, "x")
    g, gv = _input(s, G, dtype, "g")
    calls: list[int] = []
    cb = _callback(calls)
    mean, inv = poplin.distributed_norm_statistics(
        s.graph, x, EPS, s.prog, unbiased, cb, B * R, stable, R, name="stats"
    )
    xh = s.graph.add_variable(dtype, x.shape, "xh")  # whitening is popnn's: given here
    poplar.map_tensor_linearly(s.graph, xh)
    dx = poplin.distributed_norm_statistics_gradients(
        s.graph, xh, g, inv, s.prog, cb, B * R, R, name="grads"
    )
    assert calls == ([1, 1] if stable else [2]) + [2]  # partials joined in one call
    whole = np.concatenate(list(xv.astype(np.float64)), axis=0)  # [R B, C]
    n = whole.shape[0]
    mean_ref = whole.mean(axis=0)
    var = whole.var(axis=0) * (n / (n - 1) if unbiased else 1.0)
    inv_ref = 1 / np.sqrt(var + EPS)
    xh_v = ((xv - mean_ref) * inv_ref).astype(dtype.numpy)
    got = s.run({"x": (x, xv), "g": (g, gv), "xh": (xh, xh_v)}, {"m": mean, "i": inv, "dx": dx})
    tol = 2e-3 if dtype is poplar.HALF else 1e-5
    assert got["m"].dtype == dtype.numpy and got["m"].shape == (R, C)
    for r in range(R):
        np.testing.assert_allclose(got["m"][r], mean_ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(got["i"][r], inv_ref, rtol=tol, atol=tol)
    # dx = inv (g - (sum g + xh sum(g xh)) / n), the sums over both replicas
    gw = np.concatenate(list(gv.astype(np.float64)), axis=0)
    xw = np.concatenate(list(xh_v.astype(np.float64)), axis=0)
    inv_used = got["i"][0].astype(np.float64)
    ref = inv_used * (gw - (gw.sum(axis=0) + xw * (gw * xw).sum(axis=0)) / n)
    np.testing.assert_allclose(
        np.concatenate(list(got["dx"]), axis=0), ref, rtol=5 * tol, atol=5 * tol
    )


def test_bad_input_is_refused_naming_the_argument(session) -> None:
    s = session()
    x = s.graph.add_variable(poplar.FLOAT, (4,), "x")
    with pytest.raises(GraphError, match="rank >= 2"):
        poplin.distributed_norm_statistics(s.graph, x, EPS, s.prog, False, _callback([]), 4)
    y = s.graph.add_variable(poplar.FLOAT, (4, 2), "y")
    with pytest.raises(GraphError, match="norm_size must be a positive integer"):
        poplin.distributed_norm_statistics(s.graph, y, EPS, s.prog, False, _callback([]), 0)
    inv = s.graph.add_variable(poplar.FLOAT, (3,), "inv")
    with pytest.raises(GraphError, match="one per channel"):
        poplin.distributed_norm_statistics_gradients(s.graph, y, y, inv, s.prog, _callback([]), 4)
