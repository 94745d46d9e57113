"""float8 ops (popxl/ops/fp8.py) through a Session: device casts equal the host casts of
``popxl.fp8_utils`` bit for bit; the scaled matmul and convolutions equal float64
references computed from the decoded values; scale range errors at run time; dtype errors
when building; float8 constants and variables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from tremula_tests_evaluator import evaluate, run

import popxl
import popxl.ops as ops
from popxl.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8
from tremula.errors import ApplicationRuntimeError


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"test_{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_conv_tests = _load("popxl_ops_conv")
naive_conv, naive_conv_transpose = _conv_tests.naive_conv, _conv_tests.naive_conv_transpose

F143, F152 = popxl.float8_143, popxl.float8_152
RNG = np.random.default_rng(8)
SPECIAL = [0.0, -0.0, 1.0, -2.0, 240.0, 247.0, 248.0, -1000.0, 1.0625, 1.1875, 2.0**-10,
           2.0**-11, 3 * 2.0**-11, 57344.0, 61440.0, np.inf, -np.inf, np.nan]  # fmt: skip


def codes(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def scale(s: int) -> np.ndarray:
    return np.array(s, dtype=np.int32)


def random_fp8(shape, dt, spread=4.0) -> np.ndarray:
    """float8 codes of random values, NaN-free."""
    x = RNG.normal(size=shape) * spread
    return host_pow2scale_cast_to_fp8(x, dt, 0, nan_on_overflow=False)


def decoded(a: np.ndarray) -> np.ndarray:
    return host_pow2scale_cast_from_fp8(a, popxl.float64)


# ---- casts ----


@pytest.mark.parametrize("dt", [F143, F152])
@pytest.mark.parametrize("src", [np.float16, np.float32])
@pytest.mark.parametrize("log2_scale,nan_on_overflow", [(0, True), (3, False), (-5, True)])
def test_cast_to_fp8_matches_the_host_cast_bit_for_bit(dt, src, log2_scale, nan_on_overflow):
    with np.errstate(over="ignore"):
        x = np.concatenate([SPECIAL, RNG.normal(size=46) * 50]).astype(src).reshape(8, 8)
    got, ref = run(
        lambda t, s: ops.pow2scale_cast_to_fp8(t, s, dt, nan_on_overflow), x, scale(log2_scale)
    )
    want = host_pow2scale_cast_to_fp8(x, dt, log2_scale, nan_on_overflow)
    assert got[0].dtype == dt.as_numpy() and ref[0].dtype == dt.as_numpy()
    np.testing.assert_array_equal(codes(got[0]), codes(want))
    np.testing.assert_array_equal(codes(ref[0]), codes(want))


@pytest.mark.parametrize("dt", [F143, F152])
@pytest.mark.parametrize("out", [popxl.float16, popxl.float32])
@pytest.mark.parametrize("log2_scale", [0, 4, -31])
def test_cast_from_fp8_matches_the_host_cast_for_every_code(dt, out, log2_scale):
    x = np.arange(256, dtype=np.uint8).astype(dt.as_numpy()).reshape(16, 16)
    got, ref = run(lambda t, s: ops.pow2scale_cast_from_fp8(t, s, out), x, scale(log2_scale))
    want = host_pow2scale_cast_from_fp8(x, out, log2_scale)
    assert got[0].dtype == out.as_numpy()
    np.testing.assert_array_equal(got[0], want)  # NaN at 0x80; infinities past half's range
    np.testing.assert_array_equal(ref[0], want)


def test_casts_on_the_ipu_model_and_a_round_trip():
    x = (RNG.normal(size=(3, 50)) * 30).astype(np.float32)

    def build(t, s):
        q = ops.pow2scale_cast_to_fp8(t, s, F152)
        return q, ops.pow2scale_cast_from_fp8(q, ops.negate(s), popxl.float32)

    got, _ = run(build, x, scale(2), device="ipu_model")
    want = host_pow2scale_cast_to_fp8(x, F152, 2)
    np.testing.assert_array_equal(codes(got[0]), codes(want))
    np.testing.assert_array_equal(got[1], host_pow2scale_cast_from_fp8(want, popxl.float32, -2))
    np.testing.assert_allclose(got[1], x, rtol=2.0**-3)


# ---- matmul and convolutions ----


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((5, 7), (7, 3)),
        ((2, 4, 6), (6, 5)),
        ((3, 1, 2, 4), (2, 4, 3)),
        ((6,), (6, 4)),
        ((4,), (4,)),
    ],
)
@pytest.mark.parametrize(
    "dts,log2_scale", [((F143, F143), 0), ((F143, F152), -3), ((F152, F152), 5)]
)
def test_matmul_pow2scaled_equals_the_float64_product_of_the_decoded_values(
    a_shape, b_shape, dts, log2_scale
):
    a, b = random_fp8(a_shape, dts[0]), random_fp8(b_shape, dts[1])
    got, ref = run(lambda x, y, s: ops.matmul_pow2scaled(x, y, s), a, b, scale(log2_scale))
    want = np.matmul(decoded(a), decoded(b)) * 2.0**log2_scale
    assert got[0].dtype == np.float16 and got[0].shape == want.shape
    tol = 2.0**-10 * (np.abs(want) + 1e-3 * np.abs(want).max())  # float16 rounding
    assert np.all(np.abs(got[0] - want) <= tol)
    assert np.all(np.abs(ref[0] - want) <= tol)


def test_matmul_pow2scaled_sums_beyond_half_range_before_scaling():
    a = host_pow2scale_cast_to_fp8(np.full((4, 16), 40000.0), F152)  # 40960 each
    b = host_pow2scale_cast_to_fp8(np.full((16, 2), -30000.0), F152)  # -28672 each
    got, _ = run(lambda x, y, s: ops.matmul_pow2scaled(x, y, s), a, b, scale(-20),
                 device="ipu_model")  # fmt: skip
    want = 16 * 40960.0 * -28672.0 * 2.0**-20  # about -1.8e4: fits half only once scaled
    np.testing.assert_allclose(got[0].astype(np.float64), np.full((4, 2), want), rtol=2.0**-11)


@pytest.mark.parametrize(
    "stride,pads,dilation,groups",
    [((1, 1), (0, 0, 0, 0), (1, 1), 1), ((2, 1), (1, 0, 1, 2), (1, 2), 2)],
)
def test_conv_pow2scaled(stride, pads, dilation, groups):
    x = random_fp8((2, 4, 7, 6), F143)
    w = random_fp8((4, 4 // groups, 3, 2), F152, spread=1.0)
    want = naive_conv(decoded(x), decoded(w), stride, pads, dilation, groups) * 2.0**-2

    def build(a, b, s):
        return ops.conv_pow2scaled(a, b, s, stride, pads, dilation, groups)

    got, ref = run(build, x, w, scale(-2))
    for g in (got[0], ref[0]):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=2.0**-10, atol=1e-3)


def test_conv_transpose_pow2scaled():
    x = random_fp8((2, 4, 3, 4), F152)
    w = random_fp8((4, 3, 3, 2), F143, spread=1.0)
    stride, pads, out_pad, groups = (2, 3), (1, 0, 0, 1), (1, 0), 2
    want = naive_conv_transpose(decoded(x), decoded(w), stride, pads, out_pad, groups) * 2.0**3

    def build(a, b, s):
        return ops.conv_transpose_pow2scaled(a, b, s, stride, pads, groups=groups,
                                             output_padding=out_pad)  # fmt: skip

    got, ref = run(build, x, w, scale(3), device="ipu_model")
    for g in (got[0], ref[0]):
        assert g.dtype == np.float16 and g.shape == want.shape
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=2.0**-10, atol=1e-2)


# ---- the scale's range, checked when the program runs ----

BUILDS = {
    "Pow2ScaleCastToFp8": (lambda t, s: ops.pow2scale_cast_to_fp8(t, s), np.float32),
    "Pow2ScaleCastFromFp8": (lambda t, s: ops.pow2scale_cast_from_fp8(t, s), F143),
    "MatMulPow2Scaled": (lambda t, s: ops.matmul_pow2scaled(t, t, s), F152),
    "ConvPow2Scaled": (
        lambda t, s: ops.conv_pow2scaled(t.reshape((1, 1, 3, 3)), t.reshape((1, 1, 3, 3)), s),
        F143,
    ),
    "ConvTransposePow2Scaled": (
        lambda t, s: ops.conv_transpose_pow2scaled(
            t.reshape((1, 1, 3, 3)), t.reshape((1, 1, 3, 3)), s
        ),
        F152,
    ),
}


def _operand(kind) -> np.ndarray:
    x = np.linspace(-2, 2, 9).reshape(3, 3)
    if kind is np.float32:
        return x.astype(np.float32)
    return host_pow2scale_cast_to_fp8(x, kind)


@pytest.mark.parametrize("op_type", sorted(BUILDS))
@pytest.mark.parametrize("bad", [32, -33, 1000])
def test_log2_scale_out_of_range_is_a_run_time_error_naming_the_op(op_type, bad):
    build, kind = BUILDS[op_type]
    x = _operand(kind)
    with pytest.raises(ApplicationRuntimeError, match=rf"{op_type} .*log2_scale tensor 'x1'.*"
                       rf"log2_scale = {bad} .*\[-32, 31\]"):  # fmt: skip
        run(build, x, scale(bad))
    assert issubclass(ApplicationRuntimeError, RuntimeError)
    ir = popxl.Ir()
    with ir.main_graph:
        build(popxl.constant(x), popxl.constant(scale(bad)))
    with pytest.raises(ApplicationRuntimeError, match=f"log2_scale = {bad} "):
        evaluate(ir.main_graph)  # the NumPy reference refuses it too


@pytest.mark.parametrize("edge", [-32, 31])
def test_log2_scale_edges_of_the_range_run(edge):
    x = np.array([1.0, -1.5, 0.25], dtype=np.float32)
    got, _ = run(lambda t, s: ops.pow2scale_cast_to_fp8(t, s, F152), x, scale(edge))
    np.testing.assert_array_equal(codes(got[0]), codes(host_pow2scale_cast_to_fp8(x, F152, edge)))


def test_a_python_int_scale_becomes_an_int32_constant_checked_at_run_time():
    x = np.array([1.0, 2.0], dtype=np.float32)
    got, _ = run(lambda t: ops.pow2scale_cast_to_fp8(t, 3), x)
    np.testing.assert_array_equal(codes(got[0]), codes(host_pow2scale_cast_to_fp8(x, F143, 3)))
    with pytest.raises(ApplicationRuntimeError, match="log2_scale = 40"):
        run(lambda t: ops.pow2scale_cast_to_fp8(t, 40), x)


# ---- dtype and argument errors when building ----


def _refused(build, *specs) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        ins = [
            popxl.variable(np.zeros(shape, dt.as_numpy()), dt, name=f"in{i}")
            for i, (shape, dt) in enumerate(specs)
        ]
        before = (len(ir.main_graph.ops), len(ir.main_graph.tensors))
        build(*ins)
    assert (len(ir.main_graph.ops), len(ir.main_graph.tensors)) == before


@pytest.mark.parametrize(
    "build,specs,error,match",
    [
        (lambda t, s: ops.pow2scale_cast_to_fp8(t, s), [((2,), popxl.int32), ((), popxl.int32)],
         TypeError, "must be float16 or float32"),
        (lambda t, s: ops.pow2scale_cast_to_fp8(t, s, popxl.float16),
         [((2,), popxl.float32), ((), popxl.int32)], TypeError, "data_type must be"),
        (lambda t, s: ops.pow2scale_cast_to_fp8(t, s), [((2,), popxl.float32), ((), popxl.float32)],
         TypeError, "must be of type popxl.int32"),
        (lambda t, s: ops.pow2scale_cast_to_fp8(t, s), [((2,), popxl.float32), ((2,), popxl.int32)],
         ValueError, "must be a scalar tensor"),
        (lambda t, s: ops.pow2scale_cast_to_fp8(t, 1.5), [((2,), popxl.float32), ((), popxl.int32)],
         TypeError, "int32 tensor or an int"),
        (lambda t, s: ops.pow2scale_cast_from_fp8(t, s), [((2,), popxl.float16), ((), popxl.int32)],
         TypeError, "must be float8_143 or float8_152"),
        (lambda t, s: ops.pow2scale_cast_from_fp8(t, s, F152), [((2,), F143), ((), popxl.int32)],
         TypeError, "data_type must be popxl.float16 or popxl.float32"),
        (lambda a, b: ops.matmul_pow2scaled(a, b, 0), [((2, 3), popxl.float16), ((3, 2), F143)],
         TypeError, "lhs 'in0' must be float8"),
        (lambda a, b: ops.matmul_pow2scaled(a, b, 0), [((2, 3), F143), ((2, 2), F143)],
         ValueError, "contracting dimensions unequal"),
        (lambda a, b: ops.conv_pow2scaled(a, b, 0), [((1, 2, 4, 4), F143), ((3, 3, 2, 2), F143)],
         ValueError, "conv_pow2scaled: weight 'in1' .* does not fit"),
        (lambda a, b: ops.conv_pow2scaled(a, b, 0),
         [((1, 2, 4, 4), F143), ((3, 2, 2, 2), popxl.float32)], TypeError, "weight 'in1' must be"),
        (lambda a, b: ops.conv_transpose_pow2scaled(a, b, 0),
         [((1, 2, 4, 4), F143), ((3, 2, 2, 2), F152)], ValueError, "input channels first"),
        (lambda t: ops.cast(t, F143), [((2,), popxl.float32)], TypeError, "float8 casts take"),
        (lambda t: ops.cast(t, popxl.float32), [((2,), F152)], TypeError, "pow2scale_cast_from"),
    ],
)  # fmt: skip
def test_bad_dtypes_and_arguments_are_refused_before_anything_is_added(build, specs, error, match):
    with pytest.raises(error, match=match):
        _refused(build, *specs)


# ---- float8 constants and variables ----


def test_float8_tensors_from_numbers_scale_by_log2_scale_0_by_default():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable([1.0, 2.0, 300.0], F143)  # as PopXL: log2_scale 0, NaN on overflow
        c = popxl.constant(np.ones(3, np.float32), F152)
    np.testing.assert_array_equal(v._data, host_pow2scale_cast_to_fp8([1.0, 2.0, 300.0], F143))
    np.testing.assert_array_equal(v._data.view(np.uint8)[2], 0x80)
    np.testing.assert_array_equal(c._data, host_pow2scale_cast_to_fp8(np.ones(3), F152))
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(TypeError, match="int32 is not supported for float8"):
        popxl.variable(np.array([1, 2], np.int32), F143)
    with ir.main_graph, pytest.raises(TypeError, match="hold float8_152 codes"):
        popxl.constant(host_pow2scale_cast_to_fp8([1.0], F152), F143)
    assert not ir.main_graph.tensors


def test_float8_variables_and_constants_hold_codes():
    x = np.array([[1.0, -3.0, 300.0], [0.1, 2.0**-12, np.nan]])
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        v_num = popxl.variable(x, F143, log2_scale=1, nan_on_overflow=False, name="num")
        v_u8 = popxl.variable(np.array([1, 0x40, 0xC8], np.uint8), F152, name="u8")
        v_fp8 = popxl.variable(host_pow2scale_cast_to_fp8(x, F152, -3), name="fp8")
        c = popxl.constant(x, F152, log2_scale=2)
        # the device copies each variable, through a scaled cast, into a float32 output
        outs = []
        for t in (v_num, v_u8, v_fp8, c):
            y = ops.pow2scale_cast_from_fp8(t, 0, popxl.float32)
            s = popxl.d2h_stream(y.shape, y.dtype)
            ops.host_store(s, y)
            outs.append(s)
        ops.var_updates.copy_var_update_(v_u8, ops.pow2scale_cast_to_fp8(
            popxl.constant(np.array([0.5, 1.0, 2.0], np.float32)), 0, F152))  # fmt: skip
    assert v_num.dtype is F143 and v_fp8.dtype is F152 and c.dtype is F152
    want_num = host_pow2scale_cast_to_fp8(x, F143, 1, nan_on_overflow=False)
    with popxl.Session(ir, "ipu_model") as session:
        before = session.get_tensors_data([v_num, v_u8, v_fp8, c])
        got = session.run()
        after = session.get_tensor_data(v_u8)
    np.testing.assert_array_equal(codes(before[v_num]), codes(want_num))
    assert codes(want_num)[0, 2] == 0x7F  # 600 saturates
    np.testing.assert_array_equal(codes(before[v_u8]), [1, 0x40, 0xC8])
    np.testing.assert_array_equal(
        codes(before[v_fp8]), codes(host_pow2scale_cast_to_fp8(x, F152, -3))
    )
    np.testing.assert_array_equal(codes(before[c]), codes(host_pow2scale_cast_to_fp8(x, F152, 2)))
    for t in before.values():
        assert t.dtype in (F143.as_numpy(), F152.as_numpy())
    np.testing.assert_array_equal(
        got[outs[0]], host_pow2scale_cast_from_fp8(want_num, popxl.float32)
    )
    np.testing.assert_array_equal(got[outs[1]], [2.0**-17, 1.0, -4.0])  # 0xC8: e 18, m 0
    # a variable updated on the device reads back as codes in PopXL's dtype
    assert after.dtype == F152.as_numpy()
    np.testing.assert_array_equal(
        codes(after), codes(host_pow2scale_cast_to_fp8([0.5, 1, 2], F152))
    )


def test_float8_streams_take_uint8_or_float8_codes():
    x = np.arange(0, 256, 17, dtype=np.uint8)
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream(x.shape, F143, "codes")
        y = ops.pow2scale_cast_from_fp8(ops.host_load(stream), 0, popxl.float32)
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    want = host_pow2scale_cast_from_fp8(x, popxl.float32, src_dtype=F143)
    with popxl.Session(ir, "cpu") as session:
        for arr in (x, x.astype(F143.as_numpy())):
            np.testing.assert_array_equal(session.run({stream: arr})[out], want)


# ---- autodiff and profiles ----


def test_fp8_ops_pass_no_gradient():
    x_np = np.array([0.3, -1.7, 5.1], dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, name="x")

        def fn(a):
            q = ops.pow2scale_cast_from_fp8(ops.pow2scale_cast_to_fp8(a, 0), 0, popxl.float32)
            return a * q  # d/da = q (no gradient through the quantisation)

        fwd = ir.create_graph(fn, x)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, x)
        (gx,) = ops.call(info.graph, popxl.constant(np.ones(3, np.float32)),
                         inputs_dict=info.inputs_dict(site))  # fmt: skip
        s = popxl.d2h_stream(gx.shape, gx.dtype)
        ops.host_store(s, gx)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[s]
    q = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x_np), popxl.float32)
    np.testing.assert_array_equal(got, q)


def test_fp8_matmul_profile_is_valid_and_costs_the_casts():
    from tremula.profile import validate

    a, b = random_fp8((16, 32), F143), random_fp8((32, 8), F143)
    ir = popxl.Ir()
    with ir.main_graph:
        va, vb = popxl.variable(a, name="a"), popxl.variable(b, name="b")
        y = ops.matmul_pow2scaled(va, vb, popxl.constant(scale(-1)))
        s = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(s, y)
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run()[s]
    np.testing.assert_allclose(got, (decoded(a) @ decoded(b) / 2).astype(np.float16))
    graph, execution = session.engine.get_graph_profile(), session.engine.get_execution_profile()
    validate(graph, execution)
    names = graph["computeSets"]["names"]
    cycles = graph["computeSets"]["cycleEstimates"]["cyclesByTile"]
    casts = [k for k, n in enumerate(names) if "Pow2ScaleCast<" in n]
    assert len(casts) == 3  # decode lhs, decode rhs, scale the float result to half
    assert all(max(cycles[k]) > 0 for k in casts)
    assert "popops::CheckLog2Scale" in graph["vertexTypes"]["names"]


def test_replicas_scale_with_their_own_log2_scale_and_report_the_failing_replica():
    x = (np.random.default_rng(1).standard_normal((2, 5)) * 10).astype(np.float32)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((5,), popxl.float32, "x")
        ss = popxl.h2d_stream((), popxl.int32, "s")
        q = ops.pow2scale_cast_to_fp8(ops.host_load(xs), ops.host_load(ss, "scale"), F152)
        out = popxl.d2h_stream(q.shape, q.dtype)
        ops.host_store(out, q)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({xs: x, ss: np.array([1, -2], np.int32)})[out]
        for r, s in enumerate((1, -2)):
            want = host_pow2scale_cast_to_fp8(x[r], F152, s)
            np.testing.assert_array_equal(codes(got[r]), codes(want))
        with pytest.raises(ApplicationRuntimeError, match=r"'scale'.*= 40 \(replica 1\)"):
            session.run({xs: x, ss: np.array([1, 40], np.int32)})
        again = session.run({xs: x, ss: np.array([1, -2], np.int32)})[out]
    np.testing.assert_array_equal(codes(again), codes(got))


def test_popart_names_the_runtime_error():
    import popart

    assert popart.poplar_application_runtime_error is ApplicationRuntimeError
