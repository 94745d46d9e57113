"""popnn normalisation: group norm (strided and consecutive channel groups), layer norm
and batch norm statistics, whitening, normalisation, input and parameter gradients against
a float64 NumPy reference, the reference's gradients against central finite differences,
unbiased and stable variants, half, whitened-activation overloads, and bad input."""

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
RNG = np.random.default_rng(9)
EPS = 1e-3
STRIDED = {"groupNormStridedChannelGrouping": True}
CONSECUTIVE = {"groupNormStridedChannelGrouping": False}


def _run_all(rig, kind, x, gamma, beta, dy, groups=1, options=None):
    """Statistics, normalise, gradients and parameter gradients of one kind on the
    device; returns them by the reference's names."""
    g, prog = rig.graph, rig.prog
    tx, tg, tb, tdy = rig.input(x), rig.input(gamma), rig.input(beta), rig.input(dy)
    if kind == "group":
        m, s = popnn.group_norm_statistics(g, tx, EPS, prog, groups, options=options)
        out, white = popnn.group_normalise(g, tx, tg, tb, m, s, prog, options=options)
        dx = popnn.group_norm_gradients(g, tx, tdy, m, s, tg, prog, options=options)
        gd, bd = popnn.group_norm_param_gradients(g, tx, tdy, m, s, prog, options=options)
    else:
        fn = {name: getattr(popnn, f"{kind}_{name}") for name in (
            "norm_statistics", "normalise", "norm_gradients", "norm_param_gradients")}  # fmt: skip
        m, s = fn["norm_statistics"](g, tx, EPS, prog)
        out, white = fn["normalise"](g, tx, tg, tb, m, s, prog)
        dx = fn["norm_gradients"](g, tx, tdy, m, s, tg, prog)
        gd, bd = fn["norm_param_gradients"](g, tx, tdy, m, s, prog)
    names = ["mean", "inv_std", "out", "whitened", "dx", "gamma_delta", "beta_delta"]
    return dict(zip(names, rig.run([m, s, out, white, dx, gd, bd])))


CASES = [
    ("group", (3, 6, 2, 3), 3, STRIDED),
    ("group", (3, 6, 2, 3), 3, CONSECUTIVE),
    ("group", (2, 8, 5), 4, None),
    ("group", (4, 5), 5, CONSECUTIVE),
    ("layer", (5, 7), 1, None),
    ("layer", (2, 3, 4, 5), 1, None),
    ("batch", (6, 4, 3), 0, None),
    ("batch", (7, 5), 0, None),
]


@pytest.mark.parametrize(("kind", "shape", "groups", "options"), CASES)
def test_forward_and_gradients_match_numpy(kind, shape, groups, options) -> None:
    x = RNG.normal(0.5, 2, shape).astype(np.float32)
    dy = RNG.standard_normal(shape).astype(np.float32)
    gamma = RNG.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    beta = RNG.standard_normal(shape[1]).astype(np.float32)
    got = _run_all(Rig(), kind, x, gamma, beta, dy, groups, options)
    strided = (options or STRIDED)["groupNormStridedChannelGrouping"]
    idx = H.stat_index(shape, kind, groups, strided)
    want = H.norm_ref(x, idx, gamma, beta, EPS, dy)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=2e-5, err_msg=key)
        assert got[key].shape == value.shape, key


@pytest.mark.parametrize("kind", ["group", "layer", "batch"])
def test_reference_gradients_match_finite_differences(kind: str) -> None:
    shape = (3, 4, 2)
    x, dy = RNG.standard_normal(shape), RNG.standard_normal(shape)
    gamma, beta = RNG.uniform(0.5, 1.5, 4), RNG.standard_normal(4)
    idx = H.stat_index(shape, kind, 2, True)
    want = H.norm_ref(x, idx, gamma, beta, EPS, dy)

    def loss(xx=x, gg=gamma, bb=beta) -> float:
        return float(np.sum(H.norm_ref(xx, idx, gg, bb, EPS, dy)["out"] * dy))

    np.testing.assert_allclose(want["dx"], H.finite_diff(lambda z: loss(xx=z), x), atol=1e-7)
    fd_g = H.finite_diff(lambda z: loss(gg=z), gamma)
    np.testing.assert_allclose(want["gamma_delta"], fd_g, atol=1e-7)
    np.testing.assert_allclose(want["beta_delta"], H.finite_diff(lambda z: loss(bb=z), beta))


def test_unbiased_and_stable_statistics() -> None:
    """The one-pass variance ``E[x^2] - mean^2`` loses precision on data far from 0 in
    float; ``stable_algo`` (two passes) does not."""
    rig = Rig()
    x = RNG.standard_normal((4, 6, 3)).astype(np.float32)
    far = (1000 + RNG.standard_normal((4, 6, 3))).astype(np.float32)
    tx, tfar = rig.input(x), rig.input(far)
    g, prog = rig.graph, rig.prog
    outs = [
        *popnn.group_norm_statistics(g, tx, EPS, prog, 2, unbiased_var_estimate=True),
        *popnn.group_norm_statistics(g, tfar, EPS, prog, 2, True, stable_algo=True),
        *popnn.group_norm_statistics(g, tfar, EPS, prog, 2, True, stable_algo=False),
    ]
    got = rig.run(outs)
    idx = H.stat_index(x.shape, "group", 2, True)
    want = H.norm_ref(x, idx, 1, 0, EPS, x, unbiased=True)
    np.testing.assert_allclose(got[0], want["mean"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want["inv_std"], rtol=1e-5)
    want = H.norm_ref(far, idx, 1, 0, EPS, far, unbiased=True)
    np.testing.assert_allclose(got[2], want["mean"], rtol=1e-6)
    np.testing.assert_allclose(got[3], want["inv_std"], rtol=1e-4)
    assert np.abs(got[5] - want["inv_std"]).max() > np.abs(got[3] - want["inv_std"]).max()


def test_whitened_overloads_and_whiten() -> None:
    rig = Rig()
    g, prog = rig.graph, rig.prog
    shape = (4, 6)
    x = RNG.standard_normal(shape).astype(np.float32)
    dy = RNG.standard_normal(shape).astype(np.float32)
    gamma = RNG.uniform(0.5, 1.5, 6).astype(np.float32)
    tx, tdy, tg = rig.input(x), rig.input(dy), rig.input(gamma)
    m, s = popnn.layer_norm_statistics(g, tx, EPS, prog)
    white = popnn.layer_norm_whiten(g, tx, m, s, prog)
    dx = popnn.layer_norm_gradients(g, white, tdy, None, s, tg, prog)
    gd, bd = popnn.layer_norm_param_gradients(g, white, tdy, None, s, prog)
    bw = popnn.batch_norm_whiten(g, tx, *popnn.batch_norm_statistics(g, tx, EPS, prog), prog)
    gw = popnn.group_norm_whiten(g, tx, m, s, prog)  # one group: as layer norm
    got = dict(zip(["w", "dx", "gd", "bd", "bw", "gw"], rig.run([white, dx, gd, bd, bw, gw])))
    want = H.norm_ref(x, H.stat_index(shape, "layer"), gamma, np.zeros(6), EPS, dy)
    np.testing.assert_allclose(got["w"], want["whitened"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["gw"], want["whitened"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dx"], want["dx"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["gd"], want["gamma_delta"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["bd"], want["beta_delta"], rtol=1e-5, atol=1e-5)
    bwant = H.norm_ref(x, H.stat_index(shape, "batch"), 1, 0, EPS, dy)["whitened"]
    np.testing.assert_allclose(got["bw"], bwant, rtol=1e-5, atol=1e-5)


def test_half_layer_norm() -> None:
    shape = (4, 16)
    x = RNG.normal(0, 2, shape).astype(np.float16)
    dy = RNG.standard_normal(shape).astype(np.float16)
    gamma = RNG.uniform(0.5, 1.5, 16).astype(np.float16)
    beta = RNG.standard_normal(16).astype(np.float16)
    got = _run_all(Rig(), "layer", x, gamma, beta, dy)
    want = H.norm_ref(x, H.stat_index(shape, "layer"), gamma, beta, EPS, dy)
    for key, value in want.items():
        assert got[key].dtype == np.float16, key
        np.testing.assert_allclose(got[key], value, rtol=2e-2, atol=3e-2, err_msg=key)


@pytest.mark.parametrize(
    ("kind", "shape", "groups"),
    [("group", (3, 8, 5), 4), ("layer", (4, 16), 1), ("batch", (6, 4, 3), 0)],
)
def test_half_stable_statistics(kind: str, shape: tuple[int, ...], groups: int) -> None:
    """``stable_algo`` on half activations: the float mean is given the activations' type
    before it centres them (it was subtracted as float from half); the statistics come
    back half and match float64 NumPy, on data far from 0 too."""
    rig = Rig()
    g, prog = rig.graph, rig.prog
    x = RNG.normal(40, 2, shape).astype(np.float16)
    fn = getattr(popnn, f"{kind}_norm_statistics")
    args = (groups,) if kind == "group" else ()
    tx = rig.input(x)
    got = rig.run([*fn(g, tx, EPS, prog, *args, stable_algo=True)])
    want = H.norm_ref(x, H.stat_index(shape, kind, groups, True), 1, 0, EPS, x)
    assert got[0].dtype == got[1].dtype == np.float16
    np.testing.assert_allclose(got[0], want["mean"], rtol=1e-3)
    np.testing.assert_allclose(got[1], want["inv_std"], rtol=2e-2)


def test_bad_input() -> None:
    rig = Rig()
    g, prog = rig.graph, rig.prog
    x = rig.input(np.ones((4, 6, 2), np.float32))
    xh = rig.input(np.ones((4, 6, 2), np.float16))
    gamma, g5 = rig.input(np.ones(6, np.float32)), rig.input(np.ones(5, np.float32))
    m8, m7 = rig.input(np.ones(8, np.float32)), rig.input(np.ones(7, np.float32))
    mh = rig.input(np.ones(8, np.float16))
    before = H.graph_size(g)
    cases = [
        (lambda: popnn.group_norm_statistics(g, x, EPS, prog, 4), "num_groups 4 does not divide"),
        (lambda: popnn.group_norm_statistics(g, x, EPS, prog, 0), "num_groups must be"),
        (lambda: popnn.group_norm_statistics(g, x, -1.0, prog, 2), "eps must be >= 0"),
        (lambda: popnn.group_norm_statistics(g, x, EPS, prog, 2, options={"x": 1}), "unknown"),
        (lambda: popnn.group_norm_statistics(g, x[0, 0], EPS, prog, 1), "rank >= 2"),
        (lambda: popnn.layer_norm_statistics(g, x, EPS, prog, partials_type="half"), "partials"),
        (lambda: popnn.group_normalise(g, x, g5, gamma, m8, m8, prog), "gamma is float"),
        (lambda: popnn.group_normalise(g, x, gamma, gamma, m8, m7, prog), "inv_std_dev has 7"),
        (lambda: popnn.group_normalise(g, xh, gamma, gamma, mh, mh, prog), "gamma is float"),
        (lambda: popnn.group_norm_whiten(g, x, mh, m8, prog), "mean is half"),
        (lambda: popnn.group_norm_whiten(g, x, None, m8, prog), "mean must be a Tensor"),
        (lambda: popnn.layer_norm_gradients(g, x, xh, None, m8, gamma, prog), "grads_in"),
        (lambda: popnn.batch_norm_param_gradients(g, x, x, m8, m8, prog), "mean is float"),
    ]  # fmt: skip
    for call, text in cases:
        with pytest.raises(PopnnError, match=text):
            call()
    assert H.graph_size(g) == before
