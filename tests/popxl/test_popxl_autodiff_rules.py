"""Op types' gradient rules against central finite differences of the NumPy forward (the
rules checked elsewhere are linked in ``test_popxl_op_tests.py``).

The forward graph (one op, built from the op table) is evaluated on the host with the op
table's NumPy references in float64; the grad graph made by ``autodiff`` runs through a
``Session`` on "cpu". The loss is ``sum(seed * output)``, so the finite differences give
exactly what the grad graph computes from the seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tremula_tests_evaluator as evaluator

import popxl
import popxl.ops as ops
from tremula.errors import GraphError
from tremula.popxl.ops.base import OPS, create_op

RNG = np.random.default_rng(1234)
F32 = np.float32


def u(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(F32)


def away(*shape: int, gap: float = 0.3) -> np.ndarray:
    """Away from 0 (kinks of abs, relu, sign)."""
    x = u(*shape)
    return np.where(x >= 0, x + gap, x - gap).astype(F32)


def pos(*shape: int) -> np.ndarray:
    return u(*shape, lo=0.5, hi=2.0)


def distinct(*shape: int) -> np.ndarray:
    """Values 0.25 apart, shuffled (no ties for max, median, topk)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.25 - n / 8).astype(F32).reshape(shape)


#: the ConvTranspose the gradient of a grouped conv with dilation 2 makes (input [1, 4, 3],
#: kernel 2: output 1 * (3 - 1) + 2 * (2 - 1) + 1 = 5)
_DILATED_TRANSPOSE = {
    "kernel": (2,),
    "stride": (1,),
    "dilation": (2,),
    "pads_begin": (0,),
    "pads_end": (0,),
    "output_padding": (0,),
    "out": (5,),
    "groups": 2,
    "out_channels": 2,
}


@dataclass
class Case:
    """An op to differentiate: its inputs, attributes, and optionally a builder (tensors ->
    outputs) and a NumPy forward (arrays -> outputs) where the op table has no reference."""

    inputs: list[np.ndarray]
    attrs: dict[str, Any] = field(default_factory=dict)
    build: Callable[..., Any] | None = None
    numpy: Callable[..., Sequence[np.ndarray]] | None = None
    rtol: float = 1e-3


def _fmod_case(fmod: Callable[..., popxl.Tensor] = ops.fmod) -> Case:
    """fmod of a variable dividend by a constant divisor: the divisor gets no gradient
    (PopART's FmodOp has only its arg-0 grad op; see test_popxl_fidelity_round8_ops.py)."""
    b = away(2, 3, gap=0.5)
    q = RNG.integers(-3, 4, (2, 3)) + RNG.uniform(0.2, 0.8, (2, 3))
    return Case([(q * b).astype(F32)], build=lambda a: fmod(ops.identity(a), popxl.constant(b)))


def _probs(n: int, c: int, spread: float = 2.0) -> np.ndarray:
    e = np.exp(u(n, c, lo=-spread, hi=spread))
    return (e / e.sum(1, keepdims=True)).astype(F32)


_LABELS = np.array([1, 0, 3], np.int32)
_RED = {"axes": (1,), "keepdims": False}
_PRINT = {"title": "p", "print_self": False, "print_gradient": False, "format": {}}
_GATHER0 = {"axis": 0, "available_memory_proportion": None, "zero_OOR": True}
_GATHER1 = {**_GATHER0, "axis": 1}
_DYN1 = {"axes": (0,), "sizes": (2,), "no_overlap": False}
_DYN2 = {"axes": (0, 1), "sizes": (2, 3), "no_overlap": False}  # wraps around axis 1
_GROUPED = {"axis": 2, "group_size": 2, "available_memory_proportion": None, "zero_OOR": True}
_GROUPED_IDX = np.array([[[3, 0], [3, -1]], [[1, 4], [2, 1]]], np.int32)  # repeats, out of range
_ROIS = np.array([[0.5, 1.0, 7.0, 6.0], [-2.0, -1.0, 4.0, 3.0], [3.0, 2.0, 12.0, 9.0]], F32)
_ROI = {"output_size": (2, 2), "spatial_scale": 0.5, "sampling_ratio": 2, "aligned": False}
_X_ZERO = np.array([[-1.5, 0.0, 0.7], [2.0, -0.2, 1.1]], F32)  # geluerf at 0 exactly

CASES: dict[str, Case] = {
    "Add": Case([u(2, 3), u(3)]),
    "Sub": Case([u(2, 3), u(2, 1)]),
    "Mul": Case([u(2, 3), u(1, 3)]),
    "Div": Case([u(2, 3), away(3)]),
    "Pow": Case([pos(2, 3), u(2, 3, lo=-1.5, hi=1.5)]),
    "Fmod": _fmod_case(),
    "Max": Case([(a := u(2, 3)), a + away(2, 3, gap=0.1)]),
    # each input gets the seed, summed down to its shape (fixed inputs: the RNG's draws
    # are the other cases')
    "Sum": Case([np.full((2, 3), 0.5, F32), np.arange(3, dtype=F32), np.ones((1, 3), F32)]),
    "Min": Case([(a := u(2, 3)), a + away(2, 3, gap=0.1)]),
    "Neg": Case([u(2, 3)]),
    "Abs": Case([away(2, 3)]),
    "Sqrt": Case([pos(2, 3)]),
    "Exp": Case([u(2, 3)]),
    "Log": Case([pos(2, 3)]),
    "Log2": Case([pos(2, 3)]),
    "Sin": Case([u(2, 3)]),
    "Cos": Case([u(2, 3)]),
    "Tanh": Case([u(2, 3)]),
    "Sigmoid": Case([u(2, 3)]),
    "Relu": Case([away(2, 3)]),
    "Gelu": Case([u(2, 3, lo=-3, hi=3)]),
    "GeluErf": Case([_X_ZERO]),
    "Swish": Case([u(2, 3, lo=-3, hi=3)]),
    "MatMul": Case([u(2, 3), u(3, 4)], {}),
    "MatMul/1d-2d": Case([u(3), u(3, 4)], {}),
    "MatMul/2d-1d": Case([u(2, 3), u(3)], {}),
    "MatMul/batch": Case([u(2, 1, 2, 3), u(4, 3, 2)], {}),
    "Identity": Case([u(2, 3)]),
    "Reshape": Case([u(2, 3)], {"shape": (3, 1, 2)}),
    "ReshapeInplace": Case([u(2, 3)], {"shape": (6,)}),
    "Transpose": Case([u(2, 3, 2)], {"permutation": (2, 0, 1)}),
    "TransposeInplace": Case([u(2, 3)], {"permutation": (1, 0)}),
    "Slice": Case([u(3, 4)], {"key": (slice(None, None, 2), slice(1, 3))}),
    "Slice/int-none": Case([u(3, 4)], {"key": (1, None, slice(0, 3))}),
    "SliceInplace": Case([u(3, 4)], {"key": (slice(1, 3),)}),
    "Subsample": Case([u(4, 6)], {"key": (slice(None, None, 2), slice(None, None, 3))}),
    "Split": Case([u(3, 6)], {"keys": ((slice(None), slice(0, 2)), (slice(None), slice(2, 6)))}),
    "Split/one-part": Case([u(3, 6)], build=lambda x: ops.split(x, [2, 4], axis=1)[1]),
    "Cast": Case([u(2, 3)], {"dtype": popxl.float16}, numpy=lambda x: [x], rtol=1e-2),
    "CopyVarUpdate": Case(
        [u(2, 3), u(2, 3)],
        build=lambda t, x: ops.var_updates.copy_var_update_(ops.identity(t), x),
    ),
    "Accumulate": Case(
        [u(2, 3), u(2, 3), u(1)],
        build=lambda t, x, f: ops.var_updates.accumulate_(ops.identity(t), x, f),
        numpy=lambda t, x, f: [t + f * x],
    ),
    "Concat": Case([u(2, 2), u(2, 3)], {"axis": 1}),
    "ConcatInplace": Case([u(1, 3), u(2, 3)], {"axis": 0}),
    "ReduceSum": Case([u(2, 3, 2)], _RED),
    "ReduceSum/all-keepdims": Case([u(2, 3)], {"axes": (0, 1), "keepdims": True}),
    "ReduceMean": Case([u(2, 3, 2)], {"axes": (0, 2), "keepdims": False}),
    "ReduceMax": Case([distinct(2, 3, 2)], _RED),
    "ReduceMin": Case([distinct(2, 3, 2)], _RED),
    "ReduceMedian": Case([distinct(2, 3, 2)], _RED),
    "ReduceProd": Case([away(2, 3, 2)], _RED),
    "ReduceL1": Case([away(2, 3, 2)], _RED),
    "ReduceL2": Case([u(2, 3, 2)], _RED),
    "ReduceLogSum": Case([pos(2, 3, 2)], _RED),
    "ReduceLogSumExp": Case([u(2, 3, 2)], _RED),
    "ReduceSumSquare": Case([u(2, 3, 2)], _RED),
    "CumSum": Case([u(2, 4)], {"dim": 1}),
    "TopK": Case(
        [distinct(2, 5, 2)],
        {"k": 3, "axis": 1, "largest": True, "sorted": True},
        build=lambda x: ops.topk(x, 3, axis=1)[0],
    ),
    "LambSquare": Case([u(2, 3)], numpy=lambda x: [np.sum(x * x)]),
    "Softmax": Case([u(2, 4)], {"axis": 1}),
    "Nll": Case(
        [_probs(3, 4), _LABELS], {"ignore_index": None, "reduction": "mean", "log_prob": False}
    ),
    "Nll/sum-ignore-log": Case(
        [u(3, 4), _LABELS], {"ignore_index": 0, "reduction": "sum", "log_prob": True}
    ),
    "Nll/none": Case(
        [_probs(3, 4), _LABELS], {"ignore_index": 3, "reduction": "none", "log_prob": False}
    ),
    "GroupNorm": Case([u(2, 4, 3), u(4), u(4)], {"num_groups": 2, "eps": 1e-5}),
    "Gather": Case([u(4, 3), np.array([[0, 2], [2, -1]], np.int32)], _GATHER0),
    "Gather/axis1": Case([u(2, 4, 2), np.array([3, 1, 3], np.uint32)], _GATHER1),
    "TiedGather": Case([u(4, 3), np.array([1, 1, 3], np.int32)], _GATHER0),
    "Scatter": Case(
        [u(3, 4), np.array([[2, 0, -1], [0, 1, 0]], np.int32), u(2, 3)],
        {"axis": 0, "available_memory_proportion": None},
    ),
    "ScatterReduce": Case(
        [u(4, 3), np.array([[2, 0, -1], [0, 1, 0], [2, 2, 5], [1, 0, 2]], np.int32), u(3, 3)],
        build=lambda d, i, v: ops.scatter_reduce(d, i, "sum", initial_values=v),
    ),
    "ScatterReduce/max": Case(
        [distinct(4, 3), np.array([[2, 0, -1], [0, 1, 0], [2, 2, 5], [1, 0, 2]], np.int32)],
        build=lambda d, i: ops.scatter_reduce(d, i, "max", axis_size=3),
    ),
    "ScatterReduce/min-broadcast-initial": Case(
        [distinct(4, 3), np.array([1, 0, 1, -1], np.int32), distinct(3, 3) + F32(0.125)],
        build=lambda d, i, v: ops.scatter_reduce(d, i, "min", initial_values=v),
    ),
    "ScatterReduce/mul": Case(
        [u(4, 3), np.array([[2, 0, -1], [0, 1, 0], [2, 2, 5], [1, 0, 2]], np.int32)],
        build=lambda d, i: ops.scatter_reduce(d, i, "mul", axis_size=3),
    ),
    "ScatterReduce/mul-zeros-initial": Case(
        [
            # targets with two zero factors, with one (a zero datum, a zero initial value)
            np.array([[0.0, 1.5, 0.0], [-0.5, 0.0, 2.0], [0.0, 1.25, -1.5], [1.0, 0.75, 0.5]], F32),
            np.array([[2, 0, 2], [0, 1, 0], [2, 2, 5], [1, 0, 2]], np.int32),
            np.array([[0.5, 2.0, -1.0], [1.5, 1.5, 0.0], [-2.0, 1.0, 1.25]], F32),
        ],
        build=lambda d, i, v: ops.scatter_reduce(d, i, "mul", initial_values=v),
    ),
    "ScatterReduce/none": Case(
        [u(4, 3), np.array([[2, 0, -1], [0, 1, 0], [2, 2, 5], [1, 0, 2]], np.int32), u(3, 3)],
        build=lambda d, i, v: ops.scatter_reduce(d, i, "none", initial_values=v),
    ),
    "GroupedGather": Case([u(2, 3, 4), _GROUPED_IDX], _GROUPED),
    "GroupedGather/axis1-uint32": Case(
        [u(3, 4, 2), np.array([[3, 3], [0, 2], [1, 7]], np.uint32)],
        build=lambda t, i: ops.groupedgather(t, i, axis=1, group_size=3),
    ),
    "GroupedGatherGrad": Case([u(2, 3, 2, 2), _GROUPED_IDX], {"axis": 2, "data_shape": (2, 3, 4)}),
    "RoiAlign": Case(
        [u(2, 2, 4, 5), np.array([1, 0, 1], np.int32)],
        build=lambda t, b: ops.roi_align(t, popxl.constant(_ROIS), b, (2, 2), 0.5, 2),
    ),
    "RoiAlign/aligned": Case(
        [u(2, 2, 4, 5), np.array([0, 1, 1], np.int32)],
        build=lambda t, b: ops.roi_align(t, popxl.constant(_ROIS), b, (3, 1), 0.6, 1, True),
    ),
    "RoiAlignGrad": Case(
        [u(3, 2, 2, 2), np.array([1, 0, 1], np.int32)],
        build=lambda g, b: create_op(
            "RoiAlignGrad", [g, popxl.constant(_ROIS), b], {**_ROI, "input_shape": (2, 2, 4, 5)}
        )[0],
    ),
    "DynamicSlice": Case([u(4, 5), np.array([1, 3], np.uint32)], _DYN2),
    "OneHot": Case(  # the values' gradient (input 2, after the depth); -1 is the last
        [np.array([[2, 0, -1], [7, 1, 2]], np.int32), np.array(4, np.int32), u(2)],
        {"num_classes": 4, "axis": 1},
    ),
    "DynamicUpdate": Case([u(4, 5), np.array([2], np.uint32), u(2, 5)], _DYN1),
    "Where": Case([np.array([[True, False, True], [False, False, True]]), u(3), u(2, 3)]),
    "Clip": Case([np.array([[-1.2, -0.3, 0.2], [0.6, 0.9, -0.6]], F32)], {"min": -0.5, "max": 0.7}),
    "ScaledAdd": Case([u(2, 3), u(3), u(1)], {"a": 0.5, "b": None, "inplace": False}),
    "PrintTensor": Case([u(2, 3)], _PRINT),
    "IpuCopy": Case([u(2, 3)], {"source": 0, "destination": 0}),
    "IoTileCopy": Case([u(2, 3)], {"tile_set": "io"}),
    "Conv": Case([u(2, 2, 4, 4), u(3, 2, 2, 2)], build=lambda x, w: ops.conv(x, w)),
    "Conv/stride-pad-groups": Case(
        [u(1, 4, 5, 5), u(2, 2, 3, 3)],
        build=lambda x, w: ops.conv(x, w, (2, 2), (1, 1, 1, 1), groups=2),
    ),
    "Conv/1d-dilation": Case(
        [u(2, 2, 7), u(2, 2, 3)], build=lambda x, w: ops.conv(x, w, (1,), (0, 1), (2,))
    ),
    "ConvTranspose": Case(
        [u(1, 2, 3, 3), u(2, 3, 2, 2)],
        build=lambda x, w: ops.conv_transpose(x, w, (2, 2), (1, 0, 0, 1)),
    ),
    "ConvTranspose/groups": Case(
        [u(1, 4, 3), u(4, 1, 2)],
        build=lambda x, w: ops.conv_transpose(x, w, (1,), (0, 0), (1,), groups=2),
    ),
    # ops.conv_transpose refuses dilations (as PopART does); the gradient of a dilated conv
    # is a dilated ConvTranspose, whose own gradient rule this checks
    "ConvTranspose/groups-dilation": Case(
        [u(1, 4, 3), u(4, 1, 2)],
        build=lambda x, w: create_op("ConvTranspose", [x, w], _DILATED_TRANSPOSE)[0],
    ),
    "MaxPool": Case(
        [distinct(1, 2, 5, 5)], build=lambda x: ops.max_pool(x, (3, 3), (2, 2), (1, 1, 1, 1))
    ),
    "AveragePool": Case(
        [u(2, 1, 4, 5)],
        build=lambda x: ops.average_pool(x, (2, 2), (1, 2), (0, 1, 1, 0), ceil_mode=True),
    ),
    "Resize/linear": Case(
        [u(1, 2, 3, 4)],
        build=lambda x: ops.interpolate(x, (1.0, 1.0, 2.0, 1.5), mode="linear"),
    ),
    "Resize/cubic": Case(
        [u(1, 1, 4, 3)],
        build=lambda x: ops.interpolate(x, (1.0, 1.0, 1.5, 2.0), "cubic"),
    ),
    "Resize/nearest-size": Case(
        [u(2, 5, 3)], build=lambda x: ops.interpolate(x, output_size=(2, 3, 7), mode="nearest")
    ),
    "ScaledAdd/tensor-a": Case([u(2, 3), u(2, 3), u(1)], {"a": None, "b": -2.0, "inplace": False}),
    "Tan": Case([u(2, 3, lo=-1.2, hi=1.2)]),
    "Asin": Case([u(2, 3, lo=-0.9, hi=0.9)]),
    "Erf": Case([_X_ZERO]),
    "Atan2": Case([u(2, 3), away(3)]),
}

# labels in another shape than the probabilities' rows (one label per row, as PopART
# flattens both); drawn after the cases above so that their data stay as they were
CASES.update(
    {
        "Nll/none-labels-2d": Case(  # one label per row in another shape, as PopART flattens
            [_probs(6, 4, spread=0.5), np.array([[1, 0, 3], [2, 3, 1]], np.int32)],
            {"ignore_index": 0, "reduction": "none", "log_prob": False},
        ),
        "Nll/mean-labels-2d": Case(
            [_probs(4, 3).reshape(2, 2, 3), np.array([2, 0, 1, 1], np.int32)],
            {"ignore_index": None, "reduction": "mean", "log_prob": False},
        ),
        # the divisor a constant, as in "Fmod" (it has no gradient)
        "FmodInplace": _fmod_case(ops.fmod_),
    }
)

#: in-place forms whose rule reads the value the op overwrites: autodiff refuses them
READS_OVERWRITTEN = {
    "AbsInplace", "LogInplace", "Log2Inplace", "SinInplace", "CosInplace", "GeluInplace",
    "GeluErfInplace", "SwishInplace", "MulInplace", "PowInplace", "FmodInplace", "MaxInplace",
    "MinInplace",
}  # fmt: skip

#: the rules these cases do not test are linked to the tests that do in
#: test_popxl_op_tests.py (GRADIENT_TESTS), which checks every rule has one or the other


def _inplace_cases() -> dict[str, Case]:
    """The in-place elementwise forms: the updated operand is a copy of a graph input."""
    cases = {}
    for name, case in list(CASES.items()):
        inplace = name + "Inplace"
        if "/" in name or inplace not in OPS or inplace in CASES:
            continue

        def build(*xs: Any, _t: str = inplace, _a: dict = case.attrs) -> Any:
            return create_op(_t, [ops.identity(xs[0]), *xs[1:]], _a)[0]

        cases[inplace] = Case(case.inputs, case.attrs, build, case.numpy)
    return cases


ALL_CASES = {**CASES, **_inplace_cases()}


def _op_type(name: str) -> str:
    return name.split("/")[0]


# ---- the harness ----


def _build(name: str, case: Case) -> Callable[..., Any]:
    if case.build is not None:
        return case.build

    def build(*xs: Any) -> Any:
        outs = create_op(_op_type(name), list(xs), case.attrs)
        return [o for o in outs if o.dtype.is_floating_point]

    return build


def _session_grads(name: str, case: Case):
    ir = popxl.Ir()
    with ir.main_graph:
        xs = [popxl.variable(a, name=f"x{i}") for i, a in enumerate(case.inputs)]
        fwd = ir.create_graph(_build(name, case), *xs)
        n_out = len(fwd.outputs)
        seeds = [u(*t.shape).astype(t.dtype.as_numpy()) for t in fwd.outputs]
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, *xs)
        seed_vars = [popxl.variable(s, name=f"seed{i}") for i, s in enumerate(seeds)]
        grads = ops.call(info.graph, *seed_vars, inputs_dict=info.inputs_dict(site))
        streams = []
        for g in grads:
            streams.append(popxl.d2h_stream(g.shape, g.dtype))
            ops.host_store(streams[-1], g)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return fwd, n_out, seeds, [out[s] for s in streams]


@pytest.mark.parametrize("name", sorted(n for n in ALL_CASES if n not in READS_OVERWRITTEN))
def test_gradient_matches_finite_differences(name: str) -> None:
    case = ALL_CASES[name]
    fwd, n_out, seeds, got = _session_grads(name, case)
    forward = (
        (lambda vals: case.numpy(*vals))
        if case.numpy is not None
        else (lambda vals: evaluator.outputs(fwd, vals)[:n_out])
    )
    expected = evaluator.seeded_finite_differences(forward, case.inputs, seeds)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == case.inputs[i].shape
        if e is None:  # integer inputs get a zero gradient
            np.testing.assert_array_equal(g, 0)
        else:
            scale = max(1.0, float(np.abs(e).max()))
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.rtol * 0.1 * scale)


@pytest.mark.parametrize("name", sorted(READS_OVERWRITTEN))
def test_inplace_form_that_overwrites_a_needed_value_is_refused(name: str) -> None:
    case = ALL_CASES[name]
    ir = popxl.Ir()
    with ir.main_graph:
        xs = [popxl.variable(a) for a in case.inputs]
        fwd = ir.create_graph(_build(name, case), *xs)
        with pytest.raises(GraphError, match="contains a modifying op"):
            popxl.transforms.autodiff(fwd)
    assert len(ir.graphs) == 2 and len(fwd.outputs) == 1  # left as it was


def test_every_op_type_has_a_gradient_rule_or_is_marked_not_differentiable() -> None:
    missing = sorted(t for t, d in OPS.items() if d.grad is None and d.differentiable)
    assert not missing, f"op types without a gradient rule: {missing}"


@pytest.mark.parametrize("op_type", ["Floor", "Sign", "Greater"])
def test_not_differentiable_ops_pass_no_gradient(op_type: str) -> None:
    assert not OPS[op_type].differentiable and OPS[op_type].grad is None
    x = u(2, 3)

    def build(a: popxl.Tensor) -> popxl.Tensor:
        y = create_op(op_type, [a, a] if op_type == "Greater" else [a])[0]
        return a * 2.0 + ops.cast(y, popxl.float32)

    _, _, seeds, got = _session_grads("", Case([x], build=build))
    np.testing.assert_allclose(got[0], 2 * seeds[0], rtol=1e-6)


@pytest.mark.parametrize("shaped", [False, True])
def test_dropout_gradient_applies_the_forward_mask(shaped: bool) -> None:
    x_np, g_np = away(4, 6), u(4, 6)
    ir = popxl.Ir()
    with ir.main_graph:
        x, g = popxl.variable(x_np), popxl.variable(g_np)
        seed = popxl.variable(np.array([5, 9], np.uint32), name="seed")

        def fn(a, s):
            if shaped:
                return ops.shaped_dropout(a, s, (4, 1), 0.5)
            return ops.dropout(a, s, 0.5)

        fwd = ir.create_graph(fn, x, seed)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, x, seed)
        gx, _ = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
        streams = [popxl.d2h_stream(t.shape, t.dtype) for t in (site.outputs[0], gx)]
        for stream, t in zip(streams, (site.outputs[0], gx)):
            ops.host_store(stream, t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    y, got = out[streams[0]], out[streams[1]]
    assert 0 < np.count_nonzero(y) < y.size  # some kept, some dropped
    np.testing.assert_allclose(got, g_np * y / x_np, rtol=1e-5)
