"""popxl-addons' ``fp8_mse_scale`` served in Python: the scaling bias its C++ opx finds
from a histogram of the input, against a reference that runs the opx's counters and loops
in NumPy float32, a hand-computed case, and popxl-addons' wrapper as its FP8 linear layer
calls it (one session for all: the op runs 62 x 253 loop steps on the device)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.popxl.custom_ops import SERVED
from tremula.popxl.custom_ops import fp8_mse_scale as served


def loops_reference(src: np.ndarray, m: int, w: int, q: float) -> int:
    """The opx's program, step by step: histogram over 2^-126..2^127 (levels in src's
    type), normalised; 62 times: counter from 1 through the underflow, in-range and
    overflow loops, accumulating in float32; then argmin, ties and the bias."""
    f32 = np.float32
    bins = np.exp2(np.arange(-126, 128).astype(f32))
    with np.errstate(over="ignore"):  # half: 2^16 and above become inf
        levels = bins.astype(src.dtype)
    mags = np.abs(src.reshape(-1))
    counts = np.array(
        [np.sum(mags < levels[0])]
        + [np.sum((mags >= levels[i - 1]) & (mags < levels[i])) for i in range(1, 254)]
        + [np.sum(mags >= levels[253])],
        dtype=f32,
    )
    hist = (counts / f32(mags.size))[1:]
    bins[0] = bins[0] * bins[0] / f32(4)
    mse = np.zeros(62, f32)
    under, over = m, m + w
    last_in_range = None
    for bias in range(62):
        acc, counter = f32(0), 1
        while counter < under:
            acc = acc + hist[counter] * bins[counter] * bins[counter]
            counter += 1
        while under <= counter < over:
            last_in_range = bins[counter]
            acc = acc + hist[counter] * bins[counter] * bins[counter] * f32(q)
            counter += 1
        while over <= counter < 254:
            d = last_in_range - bins[counter]
            acc = acc + hist[counter] * d * d
            counter += 1
        mse[bias] = acc
        under, over = under + 1, over + 1
    first = int(np.argmin(mse))
    ties = float(np.sum((mse == mse[first]).astype(f32)))
    return -(first + int(ties / 2) - 31)


def test_scaling_biases_through_the_wrapper(addons, check_profile) -> None:
    fp8 = addons("fp8_mse_scale")
    rng = np.random.default_rng(5)
    ones = np.ones((4, 8), np.float32)
    wide = np.clip(rng.standard_cauchy(size=500) * 50, -6e4, 6e4).astype(np.float16)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        outs = [
            fp8.fp8_mse_scale(popxl.variable(ones), popxl.float8_143),
            fp8.fp8_mse_scale(popxl.variable(wide), popxl.float8_152),
        ]
        streams = []
        for t in outs:
            assert t.shape == () and t.dtype == popxl.int32
            streams.append(popxl.d2h_stream(t.shape, t.dtype))
            ops.host_store(streams[-1], t)
    attrs = [o.attrs for o in g.ops if o.type == "Fp8Scale"]
    assert [(a["min_fp32_exp_index"], a["format_span"]) for a in attrs] == [
        (85, 18),  # float8_143: -10 - 31 + 126, 7 + 10 + 1
        (78, 33),  # float8_152: -17 - 31 + 126, 15 + 17 + 1
    ]
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    results = [int(got[s]) for s in streams]
    for data, a, result in zip((ones, wide), attrs, results):
        m, w, q = a["min_fp32_exp_index"], a["format_span"], a["quantisation_error"]
        assert result == loops_reference(data, m, w, q)
        assert result == served.best_scaling_bias(data, m, w, q)
    # by hand: every value 1.0 sits in bin 126; biases 24..41 put it in range (error q,
    # the least), 18 ties from 24: -(24 + 9 - 31)
    assert results[0] == -2
    check_profile(session, "Fp8Scale")


def test_the_reference_on_spread_data() -> None:
    """The module's reference and the loop-by-loop one agree on normal data (MSEs that
    differ for most biases)."""
    x = (np.random.default_rng(2).normal(size=300) * 3).astype(np.float32)
    mse = served.mse_per_bias(x, 85, 18, 2.0**-14)
    assert len(set(mse.tolist())) > 20
    assert int(served.best_scaling_bias(x, 85, 18, 2.0**-14)) == loops_reference(
        x, 85, 18, 2.0**-14
    )


def test_binding_surface_and_errors() -> None:
    assert SERVED[("popxl.addons.ops", "Fp8Scale", 1)] == served.__name__
    assert served.Fp8FindBestScaleOp.default_opid()[:3] == ("popxl.addons.ops", "Fp8Scale", 1)
    ir = popxl.Ir()
    g = ir.main_graph
    make = served.Fp8FindBestScaleOp.create_op_in_graph
    with g:
        x = popxl.variable(np.ones(4, np.float32))
        xi = popxl.variable(np.ones(4, np.int32))
        ok = served.Fp8ScalingBiasParams(85, 18, 1e-4)
        with pytest.raises(ValueError, match="must be >= 1 with"):
            make(g._pb_graph, {0: x.id}, {}, served.Fp8ScalingBiasParams(200, 18, 1e-4), None)
        with pytest.raises(TypeError, match="params must be Fp8ScalingBiasParams"):
            make(g._pb_graph, {0: x.id}, {}, (85, 18, 1e-4), None)
        with pytest.raises(TypeError, match="src must be float16 or float32"):
            make(g._pb_graph, {0: xi.id}, {}, ok, None)
    assert not g.ops
