"""poprand: the values follow the distributions asked for (fixed seeds, so no flakiness)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tremula import poplar
from tremula.libs import poprand

N = (40, 500)  # 20000 samples


def _draw(run, ref, fn, *args, dtype="float", seed=(11, 22), tiles=4, **kw):
    def build(g, s, p):
        return {"x": fn(g, s, 3, ref(g, N), dtype, *args, p, **kw)}

    return run(build, seed=seed, tiles=tiles)["x"]


@pytest.mark.parametrize("dtype", ["float", "half"])
@pytest.mark.parametrize("lo,hi", [(0.0, 1.0), (-3.0, 5.0)])
def test_uniform_ks(run, ref, dtype, lo, hi):
    x = _draw(run, ref, poprand.uniform, lo, hi, dtype=dtype)
    assert x.dtype == poplar.as_type(dtype).numpy
    assert x.min() >= lo and x.max() <= hi
    assert stats.kstest(x.ravel().astype(np.float64), stats.uniform(lo, hi - lo).cdf).pvalue > 1e-3


@pytest.mark.parametrize("lo,hi", [(-5, 5), (0, 1), (7, 7), (-(2**31), 2**31 - 1)])
def test_uniform_int_inclusive_range(run, ref, lo, hi):
    x = _draw(run, ref, poprand.uniform, lo, hi, dtype="int")
    assert x.dtype == np.int32
    assert x.min() >= lo and x.max() <= hi
    if hi - lo < 20:  # every value appears, equally often (chi-square)
        counts = np.bincount(x.ravel() - lo, minlength=hi - lo + 1)
        assert counts.size == hi - lo + 1 and counts.min() > 0
        if counts.size > 1:
            assert stats.chisquare(counts).pvalue > 1e-3
    else:
        u = (x.ravel().astype(np.float64) - lo) / (hi - lo + 1.0)
        assert stats.kstest(u, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("dtype", ["float", "half"])
def test_normal_ks(run, ref, dtype):
    x = _draw(run, ref, poprand.normal, 2.0, 0.5, dtype=dtype).ravel().astype(np.float64)
    assert stats.kstest(x, stats.norm(2.0, 0.5).cdf).pvalue > 1e-3
    assert abs(x.mean() - 2.0) < 5 * 0.5 / np.sqrt(x.size)


def test_normal_with_zero_stdev_is_the_mean(run, ref):
    x = _draw(run, ref, poprand.normal, -1.25, 0.0)
    assert np.all(x == -1.25)


@pytest.mark.parametrize("dtype", ["float", "half"])
@pytest.mark.parametrize("alpha", [0.3, 2.0, 9.0])
def test_truncated_normal_bounds_and_shape(run, ref, dtype, alpha):
    mean, stdev = 1.0, 2.0
    x = _draw(run, ref, poprand.truncated_normal, mean, stdev, alpha, dtype=dtype)
    npt = poplar.as_type(dtype).numpy
    lo, hi = npt.type(mean - alpha * stdev), npt.type(mean + alpha * stdev)
    assert x.min() >= lo and x.max() <= hi
    if dtype == "float":
        law = stats.truncnorm(-alpha, alpha, loc=mean, scale=stdev)
        assert stats.kstest(x.ravel().astype(np.float64), law.cdf).pvalue > 1e-3


@pytest.mark.parametrize("dtype", ["float", "half", "int"])
@pytest.mark.parametrize("prob", [0.0, 0.1, 0.5, 0.97, 1.0])
def test_bernoulli_mean(run, ref, dtype, prob):
    x = _draw(run, ref, poprand.bernoulli, prob, dtype=dtype)
    assert set(np.unique(x)) <= {0, 1}
    sd = np.sqrt(prob * (1 - prob) / x.size)
    assert abs(x.mean() - prob) <= 5 * sd + 1e-12


def test_log_uniform_ks(run, ref):
    x = _draw(run, ref, poprand.log_uniform, 0.01, 100.0).ravel().astype(np.float64)
    assert x.min() >= np.float32(0.01) and x.max() <= np.float32(100.0)
    law = stats.uniform(np.log(0.01), np.log(100.0) - np.log(0.01))
    assert stats.kstest(np.log(x), law.cdf).pvalue > 1e-3


def test_log_uniform_base_does_not_change_the_numbers(run, ref):
    a = _draw(run, ref, poprand.log_uniform, 1.0, 50.0, dtype="half")
    b = _draw(run, ref, poprand.log_uniform, 1.0, 50.0, dtype="half", base=10.0)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize("keep", [0.1, 0.8, 1.0])
def test_dropout_keep_ratio_and_scaling(run, dtype, keep):
    data = np.random.default_rng(5).uniform(0.5, 2.0, N).astype(dtype.numpy)
    scale = 1.0 / keep

    def build(g, s, p):
        x = g.add_constant(dtype, N, data, "x")
        poplar.map_tensor_linearly(g, x)
        r = g.add_variable(dtype, N, "r")
        g.set_tile_mapping(r, np.arange(data.size).reshape(N) % g.num_tiles)
        return {
            "y": poprand.dropout(g, s, 4, x, r, keep, scale, p),
            "mask": poprand.bernoulli(g, s, 4, r, dtype, keep, p),
        }

    out = run(build)
    y, mask = out["y"], out["mask"]
    assert y.dtype == dtype.numpy
    kept = y != 0
    np.testing.assert_array_equal(kept, mask == 1)  # the mask is bernoulli(keep)'s
    np.testing.assert_array_equal(y[kept], data[kept] * dtype.numpy.type(scale))
    sd = np.sqrt(keep * (1 - keep) / data.size)
    assert abs(kept.mean() - keep) <= 5 * sd + 1e-12


def test_dropout_reference_defaults_to_the_input(run):
    def build(g, s, p):
        x = g.add_constant(poplar.FLOAT, (3, 5), 2.0, "x")
        g.set_tile_mapping(x, np.arange(15).reshape(3, 5) % 4)
        return {"y": poprand.dropout(g, s, 0, x, None, 0.5, 3.0, p)}

    y = run(build)["y"]
    assert set(np.unique(y)) <= {0.0, 6.0}
