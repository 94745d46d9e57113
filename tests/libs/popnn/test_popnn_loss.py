"""popnn losses: calc_loss (cross entropy, sum squared) and nll_loss against NumPy, with
deltas and model-output scales as numbers and tensors, label edge cases (masked, out of
range, negative), deltas against finite differences of the loss of the logits, half, the
estimator and bad input."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula.libs import popnn, util
from tremula.libs.popnn import LossType, PopnnError


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
RNG = np.random.default_rng(3)
EPS = 1e-7


def ce_ref(p, labels, ds=1.0, mos=1.0):
    hot = H.one_hot(labels, p.shape[1])
    p = p.astype(np.float64)
    picked = (p * hot).sum(1)
    loss = np.where(hot.any(1), -(np.log(picked + EPS) - np.log(mos)), 0.0)
    return loss, ds * (p / mos - hot)


def sse_ref(p, labels, ds=1.0, mos=1.0):
    d = p.astype(np.float64) / mos - H.one_hot(labels, p.shape[1])
    return 0.5 * (d * d).sum(1), ds * d


@pytest.mark.parametrize("label_type", [np.uint32, np.int32])
@pytest.mark.parametrize("kind", ["CROSS_ENTROPY_LOSS", "SUM_SQUARED_LOSS"])
def test_calc_loss_matches_numpy(kind: str, label_type) -> None:
    rig = Rig(tiles=4)
    n, c = 7, 13
    p = H.softmax(RNG.standard_normal((n, c))).astype(np.float32)
    labels = RNG.integers(0, c, n).astype(label_type)
    tp = rig.input(p, mapping=RNG.integers(0, 4, (n, c)))  # rows spread over tiles
    tl = rig.input(labels)
    ds_t = rig.input(np.array([0.25], np.float32), mapping=2)
    l1, d1 = popnn.calc_loss(rig.graph, tp, tl, kind, rig.prog)
    l2, d2 = popnn.calc_loss(rig.graph, tp, tl, LossType[kind], rig.prog, ds_t, 2.0)
    got = rig.run([l1, d1, l2, d2])
    ref = ce_ref if kind.startswith("CROSS") else sse_ref
    for (loss, deltas), (want_l, want_d) in zip(
        [got[:2], got[2:]], [ref(p, labels), ref(p, labels, 0.25, 2.0)]
    ):
        np.testing.assert_allclose(loss, want_l, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(deltas, want_d, rtol=1e-5, atol=1e-7)
    assert l1.shape == (n,) and d1.shape == (n, c)
    assert np.array_equal(rig.graph.tiles_of(d1), rig.graph.tiles_of(tp))


def test_label_edge_cases_give_a_zero_loss_row() -> None:
    rig = Rig()
    c = 5
    p = H.softmax(RNG.standard_normal((6, c))).astype(np.float32)
    labels_u = np.array([0, c - 1, c, popnn.MASKED_LABEL_CODE, 2, 10**6], np.uint32)
    labels_i = np.array([0, -1, c, -(2**31), 4, 3], np.int32)
    tp = rig.input(p)
    outs = []
    for labels in (labels_u, labels_i):
        tl = rig.input(labels)
        outs += popnn.calc_loss(rig.graph, tp, tl, "CROSS_ENTROPY_LOSS", rig.prog, 3.0)
        outs += popnn.nll_loss(rig.graph, tp, tl, rig.prog)
    got = rig.run(outs)
    for k, labels in enumerate((labels_u, labels_i)):
        loss, deltas, nll, _ = got[4 * k : 4 * k + 4]
        valid = (labels.astype(np.int64) >= 0) & (labels.astype(np.int64) < c)
        want_l, want_d = ce_ref(p, labels, 3.0)
        np.testing.assert_allclose(loss, want_l, rtol=1e-5)
        np.testing.assert_allclose(deltas, want_d, rtol=1e-5, atol=1e-7)
        assert np.all(loss[~valid] == 0) and np.all(nll[~valid] == 0)
        np.testing.assert_allclose(deltas[~valid], 3.0 * p[~valid], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_nll_loss_from_probs_matches_numpy(dtype) -> None:
    """``-log(p[label])`` (no epsilon) and ``s * (p - one_hot)``; labels out of range give
    loss 0 and deltas ``s * p``; the same numbers as ``nll_loss`` of ``log(p)``."""
    rig = Rig(tiles=4)
    n, c = 9, 6
    p = H.softmax(RNG.standard_normal((n, c))).astype(dtype)
    labels = np.array([0, 5, 3, 6, -1, 2, 2, 1, 4], np.int32)
    tp = rig.input(p, mapping=RNG.integers(0, 4, (n, c)))
    tl = rig.input(labels)
    loss, deltas = popnn.nll_loss_from_probs(rig.graph, tp, tl, rig.prog, deltas_scale=0.5)
    got_l, got_d = rig.run([loss, deltas])
    hot = H.one_hot(labels, c)
    valid = hot.any(1)
    p64 = p.astype(np.float64)
    want_l = np.where(valid, -np.log(np.where(valid, (p64 * hot).sum(1), 1.0)), 0.0)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got_l, want_l, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_d, 0.5 * (p64 - hot), rtol=tol, atol=tol)
    assert got_l.dtype == dtype and got_d.dtype == dtype


def test_cross_entropy_deltas_are_the_gradient_of_the_logits() -> None:
    rig = Rig()
    z = RNG.standard_normal((4, 6))
    labels = np.array([1, 0, 5, 3], np.uint32)
    tz = rig.input(z.astype(np.float32))
    tl = rig.input(labels)
    probs = popnn.softmax(rig.graph, tz, rig.prog)
    ce_loss, ce_d = popnn.calc_loss(rig.graph, probs, tl, "CROSS_ENTROPY_LOSS", rig.prog)
    nll, nll_d = popnn.nll_loss(rig.graph, popnn.log_softmax(rig.graph, tz, rig.prog), tl, rig.prog)
    got_l, got_d, got_nll, got_nd = rig.run([ce_loss, ce_d, nll, nll_d])
    total = lambda zz: float(-np.sum(H.log_softmax(zz)[np.arange(4), labels]))  # noqa: E731
    fd = H.finite_diff(total, z)
    np.testing.assert_allclose(got_d, fd, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_nd, fd, rtol=1e-4, atol=1e-6)
    want = -H.log_softmax(z)[np.arange(4), labels]
    np.testing.assert_allclose(got_l, want, rtol=1e-5)
    np.testing.assert_allclose(got_nll, want, rtol=1e-5)


def test_model_output_scaling_cancels_in_the_loss() -> None:
    rig = Rig()
    p = H.softmax(RNG.standard_normal((3, 4)))
    labels = np.array([0, 1, 2], np.uint32)
    scaled = rig.input((p * 1000).astype(np.float32))
    mos = rig.input(np.array([1000.0], np.float32))
    tl = rig.input(labels)
    loss, deltas = popnn.calc_loss(rig.graph, scaled, tl, "CROSS_ENTROPY_LOSS", rig.prog, 1.0, mos)
    got_l, got_d = rig.run([loss, deltas])
    np.testing.assert_allclose(got_l, -np.log(p[np.arange(3), labels]), rtol=1e-5)
    np.testing.assert_allclose(got_d, p - H.one_hot(labels, 4), rtol=1e-5, atol=1e-6)


def test_half_losses() -> None:
    rig = Rig()
    p = H.softmax(RNG.standard_normal((5, 9))).astype(np.float16)
    labels = RNG.integers(0, 9, 5).astype(np.uint32)
    tp, tl = rig.input(p), rig.input(labels)
    ds = rig.input(np.array([0.5], np.float16))
    outs = [
        *popnn.calc_loss(rig.graph, tp, tl, "CROSS_ENTROPY_LOSS", rig.prog, ds),
        *popnn.calc_loss(rig.graph, tp, tl, "SUM_SQUARED_LOSS", rig.prog),
    ]
    ce_l, ce_d, sq_l, sq_d = rig.run(outs)
    assert ce_l.dtype == np.float16 and sq_d.dtype == np.float16
    want = ce_ref(p, labels, 0.5)
    np.testing.assert_allclose(ce_l, want[0], rtol=2e-3)
    np.testing.assert_allclose(ce_d, want[1], rtol=2e-3, atol=1e-3)
    want = sse_ref(p, labels)
    np.testing.assert_allclose(sq_l, want[0], rtol=2e-3)
    np.testing.assert_allclose(sq_d, want[1], rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("rows", [1, 13])
def test_estimate_shape(rows: int) -> None:
    """``30 + rows x (40 + ceil(C / vw) x 4)`` per cross-entropy vertex; a tile's rows are
    split over at most six vertices."""
    rig = Rig()
    c = 11
    tp = rig.input(np.full((rows, c), 1 / c, np.float32), mapping=0)
    tl = rig.input(np.zeros(rows, np.uint32), mapping=0)
    popnn.calc_loss(rig.graph, tp, tl, "CROSS_ENTROPY_LOSS", rig.prog, name="ce")
    rig.run([])
    _, sizes = util.split_counts(np.array([rows]), 6)
    _, by_type = H.cs_estimates(rig.engine, "ce/")
    want = sum(30 + int(r) * (40 + math.ceil(c / 2) * 4) for r in sizes)
    assert by_type == {"popnn::LossCrossEntropyRows<float,uint32>": want}


def test_bad_input() -> None:
    rig = Rig()
    g, prog = rig.graph, rig.prog
    p = rig.input(np.ones((3, 4), np.float32))
    ph = rig.input(np.ones((3, 4), np.float16))
    pi = rig.input(np.ones((3, 4), np.int32))
    lab = rig.input(np.zeros(3, np.uint32))
    lab_f = rig.input(np.zeros(3, np.float32))
    lab_4 = rig.input(np.zeros(4, np.uint32))
    ce, sq = "CROSS_ENTROPY_LOSS", "SUM_SQUARED_LOSS"
    before = H.graph_size(g)
    cases = [
        (lambda: popnn.calc_loss(g, p, lab_f, ce, prog), "expected must be class indices"),
        (lambda: popnn.calc_loss(g, p, lab_4, ce, prog), r"expected has shape \(4,\)"),
        (lambda: popnn.calc_loss(g, p[0], lab, ce, prog), "model_outputs must be"),
        (lambda: popnn.calc_loss(g, p, lab, "HINGE", prog), "loss_type 'HINGE'"),
        (lambda: popnn.calc_loss(g, p, lab, sq, prog, ph[0, :1]), "deltas_scale"),
        (lambda: popnn.calc_loss(g, p, lab, sq, prog, p[0]), "deltas_scale"),
        (lambda: popnn.calc_loss(g, p, lab, sq, prog, 1.0, 0.0), "must be > 0"),
        (lambda: popnn.calc_loss(g, p, lab, sq, prog, float("nan")), "finite"),
        (lambda: popnn.nll_loss(g, pi, lab, prog), "log_probs must be float"),
        (lambda: popnn.nll_loss(g, p, lab.reshape([3, 1]), prog), "labels has shape"),
    ]  # fmt: skip
    for call, text in cases:
        with pytest.raises(PopnnError, match=text):
            call()
    assert H.graph_size(g) == before


@pytest.mark.parametrize("from_probs", [False, True], ids=["nll", "nll_from_probs"])
def test_prepared_nll_gives_the_bits_of_compute_run_after_run(from_probs, monkeypatch) -> None:
    """The prepared NLL run through flat indices (``_nll_flat``), falling back to the
    masked path on a run with an out-of-range or negative label: loss and deltas hold the
    bits of ``compute`` on every run, the first (interpreted) and the replayed ones."""
    from tremula.libs.popnn import codelets as pc

    made: list[bool] = []
    real = pc._nll_flat

    def spy(*args):
        fast = real(*args)
        made.append(fast is not None)
        return fast

    monkeypatch.setattr(pc, "_nll_flat", spy)
    n, c = 12, 7
    rng = np.random.default_rng(5)
    runs = []
    for _ in range(4):
        p = H.softmax(rng.standard_normal((n, c))).astype(np.float32)
        runs.append((p if from_probs else np.log(p), rng.integers(0, c, n).astype(np.int32)))
    runs[2][1][[1, 7]] = [-1, c]  # masked and out of range: the general path
    results = []
    for prepared in (True, False):
        if not prepared:
            for codelet in pc.LOSS_CODELETS.values():
                monkeypatch.setattr(codelet, "prepare", None)
        rig = Rig(tiles=1)
        tp = rig.input(runs[0][0], mapping=0)
        tl = rig.input(runs[0][1], mapping=0)
        ds = rig.input(np.array([0.25], np.float32), mapping=0)
        op = popnn.nll_loss_from_probs if from_probs else popnn.nll_loss
        loss, deltas = op(rig.graph, tp, tl, rig.prog, deltas_scale=ds.reshape([]))
        got = []
        for probs, labels in runs:
            rig.feeds["in0"], rig.feeds["in1"] = probs, labels
            got.append([x.tobytes() for x in rig.run([loss, deltas])])
        results.append(got)
    assert made and all(made)
    assert results[0] == results[1]
    # and the numbers themselves (run 2 has its masked rows)
    p, labels = runs[2]
    probs = p if from_probs else np.exp(p.astype(np.float64))
    valid = (labels >= 0) & (labels < c)
    hot = H.one_hot(np.where(valid, labels, -1), c)
    want_d = 0.25 * (probs - hot)
    got_l = np.frombuffer(results[0][2][0], np.float32)
    got_d = np.frombuffer(results[0][2][1], np.float32).reshape(n, c)
    np.testing.assert_allclose(got_d, want_d, rtol=1e-5, atol=1e-7)
    picked = np.log(probs[np.arange(n), np.where(valid, labels, 0)])
    np.testing.assert_allclose(got_l, np.where(valid, -picked, 0), rtol=1e-5, atol=1e-6)


def test_compiled_nll_gives_the_numpy_path_s_bits_on_special_values(monkeypatch) -> None:
    """The NLL loss from probabilities as one compiled loop (``popnn/nll_kernel.py``, from
    a prepared run's second call): loss and deltas hold the NumPy path's bits on every run
    with NaNs of several payloads, signalling NaNs, infinities, signed zeros and subnormals
    as probabilities and infinities, zeros and subnormals as the deltas scale; a NaN scale
    and a masked or out-of-range label leave the run to the NumPy path."""
    from tremula.libs import jit
    from tremula.libs.popnn import nll_kernel

    if not jit.available():
        pytest.skip("needs the fast extra (numba)")
    made: list[bool] = []
    real = nll_kernel.compiled

    def spy(*args):  # type: ignore[no-untyped-def]
        run = real(*args)
        made.append(run is not None)
        return run

    monkeypatch.setattr(nll_kernel, "compiled", spy)
    bits = [0x7FC00000, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000, 1, 0]
    special = np.array(bits, np.uint32).view(np.float32)
    n, c = 12, 9
    rng = np.random.default_rng(8)
    runs = []
    for r in range(5):
        p = H.softmax(rng.standard_normal((n, c))).astype(np.float32)
        p[r % 3 :: 3, :] = np.resize(np.roll(special, r), c)  # special rows, labels on them
        labels = rng.integers(0, c, n).astype(np.int32)
        scale = np.float32(0.25) if r % 2 else special[r % special.size]
        runs.append((p, labels, np.array([scale], np.float32)))
    runs[3][1][[1, 7]] = [-1, c]  # masked and out of range: the general path
    results = []
    for compiled in (True, False):
        previous = jit.set_enabled(compiled)
        try:
            rig = Rig(tiles=1)
            tp = rig.input(runs[0][0], mapping=0)
            tl = rig.input(runs[0][1], mapping=0)
            ds = rig.input(runs[0][2], mapping=0)
            loss, deltas = popnn.nll_loss_from_probs(
                rig.graph, tp, tl, rig.prog, deltas_scale=ds.reshape([])
            )
            got = []
            for p, labels, scale in runs:
                rig.feeds["in0"], rig.feeds["in1"], rig.feeds["in2"] = p, labels, scale
                got.append([x.tobytes() for x in rig.run([loss, deltas])])
            results.append(got)
        finally:
            jit.set_enabled(previous)
    assert made == [True, False]  # each engine asked on its second run: compiled, NumPy
    assert results[0] == results[1]
