"""ONNX ops beyond the Builder's opsets (ONNX files exported by other frameworks, opsets 10
to 18) against onnxruntime: each case is a one- or two-node model written with
``onnx.helper``, run in an inference session and in onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tremula_tests_popart_helpers import ipu

import popart

RNG = np.random.default_rng(7)


def F(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def I64(values: Any) -> np.ndarray:
    return np.asarray(values, np.int64)


_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}


def _model(nodes: list[Any], feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray],
           outputs: list[str], opset: int) -> bytes:  # fmt: skip
    inputs = [helper.make_tensor_value_info(k, _TYPES[v.dtype], v.shape) for k, v in feeds.items()]
    graph = helper.make_graph(
        nodes, "case", inputs, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                                for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in [*model.graph.value_info, *model.graph.output]
             if v.type.tensor_type.elem_type}  # fmt: skip
    del model.graph.output[:]
    float_out = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    model.graph.output.extend(typed.get(o, f) for o, f in zip(outputs, float_out))
    return model.SerializeToString()


def node(op: str, inputs: list[str], **attrs: Any) -> Any:
    return helper.make_node(op, inputs, ["y"], **attrs)


X = F(2, 3, 4)
X4 = F(1, 8, 2, 3)
# name -> (nodes, feeds, initializers, opset)
CASES: dict[str, tuple[list[Any], dict[str, np.ndarray], dict[str, np.ndarray], int]] = {
    "mod_python": ([node("Mod", ["a", "b"])],
                   {"a": np.array([7, -7, 7, -7, 5, 0, -9], np.int32),
                    "b": np.array([3, 3, -3, -3, 5, 2, 4], np.int32)}, {}, 13),
    "mod_c": ([node("Mod", ["a", "b"], fmod=1)],
              {"a": np.array([5.5, -5.5, 5.5, -5.5], np.float32)},
              {"b": np.array([2, 2, -2, -2], np.float32)}, 13),
    "greater_or_equal": ([node("GreaterOrEqual", ["x", "z"])],
                         {"x": np.array([1, 0, -1, np.nan], np.float32)},
                         {"z": np.zeros(4, np.float32)}, 12),
    "less_or_equal": ([node("LessOrEqual", ["x", "z"])],
                      {"x": np.array([1, 0, -1, np.nan], np.float32)},
                      {"z": np.zeros(4, np.float32)}, 12),
    "hard_swish": ([node("HardSwish", ["x"])], {"x": F(2, 3, 4, scale=4)}, {}, 14),
    "celu": ([node("Celu", ["x"], alpha=0.7)], {"x": X}, {}, 12),
    "thresholded_relu": ([node("ThresholdedRelu", ["x"], alpha=0.3)], {"x": X}, {}, 10),
    "hardmax": ([node("Hardmax", ["x"], axis=1)], {"x": X}, {}, 13),
    "hardmax_2d": ([node("Hardmax", ["x"], axis=1)], {"x": X}, {}, 11),
    "depth_to_space": ([node("DepthToSpace", ["x"], blocksize=2)], {"x": X4}, {}, 13),
    "depth_to_space_crd": ([node("DepthToSpace", ["x"], blocksize=2, mode="CRD")],
                           {"x": X4}, {}, 13),
    "space_to_depth": ([node("SpaceToDepth", ["x"], blocksize=2)], {"x": F(1, 2, 4, 6)}, {}, 13),
    "trilu_upper": ([node("Trilu", ["x", "k"])], {"x": X}, {"k": I64(1)}, 14),
    "trilu_lower_host": (
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("ConstantOfShape", ["s"], ["o"],
                          value=numpy_helper.from_array(np.ones(1, np.float32))),
         helper.make_node("Trilu", ["o"], ["m"], upper=0), node("Mul", ["x", "m"])],
        {"x": X}, {}, 14),
    "einsum_matmul": ([node("Einsum", ["x", "w"], equation="bij,jk->bik")],
                      {"x": X}, {"w": F(4, 5)}, 12),
    "einsum_attention": ([node("Einsum", ["q", "k"], equation="bhid,bhjd->bhij")],
                         {"q": F(2, 3, 4, 5)}, {"k": F(2, 3, 6, 5)}, 12),
    "einsum_ellipsis_implicit": ([node("Einsum", ["x", "w"], equation="...ij,jk")],
                                 {"x": X}, {"w": F(4, 2)}, 12),
    "einsum_sum_and_transpose": ([node("Einsum", ["x"], equation="ijk->ki")], {"x": X}, {}, 12),
    "einsum_outer_and_sum": ([node("Einsum", ["x", "w"], equation="ij,k->jk")],
                             {"x": F(3, 4)}, {"w": F(5)}, 12),
    "cumsum_exclusive_reverse": ([node("CumSum", ["x", "a"], exclusive=1, reverse=1)],
                                 {"x": X}, {"a": I64(2)}, 13),
    "cumsum_reverse": ([node("CumSum", ["x", "a"], reverse=1)], {"x": X}, {"a": I64(-2)}, 13),
    "argmax_last": ([node("ArgMax", ["x"], axis=1, keepdims=0, select_last_index=1)],
                    {"x": np.round(X)}, {}, 12),
    "argmin_last": ([node("ArgMin", ["x"], axis=2, select_last_index=1)],
                    {"x": np.round(X)}, {}, 12),
    "pad_reflect": ([node("Pad", ["x", "p"], mode="reflect")],
                    {"x": X}, {"p": I64([0, 1, 3, 0, 1, 2])}, 13),
    "pad_edge": ([node("Pad", ["x", "p"], mode="edge")],
                 {"x": X}, {"p": I64([1, 0, 2, 0, 2, 1])}, 13),
    "average_pool_include_pad": (
        [node("AveragePool", ["x"], kernel_shape=[3, 2], pads=[1, 1, 1, 0], strides=[2, 1],
              count_include_pad=1)], {"x": F(1, 2, 5, 4)}, {}, 11),
    "lrn": ([node("LRN", ["x"], size=3, alpha=0.3, beta=0.6, bias=1.5)], {"x": X4}, {}, 13),
    "lrn_default": ([node("LRN", ["x"], size=5)], {"x": X4}, {}, 13),
    "group_norm_per_group": ([node("GroupNormalization", ["x", "s", "b"], num_groups=2)],
                             {"x": F(2, 4, 2, 3)}, {"s": F(2), "b": F(2)}, 18),
    "shape_start_end": ([helper.make_node("Shape", ["x"], ["s"], start=-2, end=-1),
                         node("Cast", ["s"], to=TensorProto.FLOAT)], {"x": X}, {}, 15),
    "shape_start": ([helper.make_node("Shape", ["x"], ["s"], start=1),
                     node("Cast", ["s"], to=TensorProto.FLOAT)], {"x": X}, {}, 15),
    "pad_axes": ([node("Pad", ["x", "p", "", "a"])], {"x": X},
                 {"p": I64([1, 2, 0, 3]), "a": I64([-1, 0])}, 18),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_op_matches_onnxruntime(name: str) -> None:
    nodes, feeds, inits, opset = CASES[name]
    proto = _model(nodes, feeds, inits, ["y"], opset)
    (want,) = ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(["y"], feeds)
    session = popart.InferenceSession(proto, popart.DataFlow(1, ["y"]), ipu())
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, out))
    got = out["y"]
    assert got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:  # int64 results (indices) come back as int32, as in PopART
        np.testing.assert_array_equal(got, want)
