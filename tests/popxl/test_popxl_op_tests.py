"""Which test checks each op type: one table for the forward pass, one for gradients, keyed
by op type, and completeness tests that walk the op definitions (``OPS``), not the test
files.

``FORWARD[op_type]`` is either

* a :class:`Forward` case, run here by :func:`test_forward_case`: the op built over
  h2d-fed inputs runs through a Session, and both its output and the op references' output
  (``tests/evaluator.py``) must equal what NumPy computes here, independently of the op's
  own reference; or
* the node id (``path::function``) of the dedicated test that checks the op's results
  against an independent reference (NumPy, a closed form, hand-computed values), checked
  here to name a test function that exists.

An in-place form without an entry of its own is covered through its out-of-place op when it
is lowered by the very same rule (``LOWERING_RULES``); a form lowered by a rule of its own
needs its own entry. The element-wise in-place forms get cases of their own, made from their
out-of-place op's.

The gradient rules: each is checked against finite differences by a case of
``test_popxl_autodiff_rules.py`` (``ALL_CASES``), or by the dedicated test that
:data:`GRADIENT_TESTS` names.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import math
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tremula_tests_evaluator as evaluator

import popxl
import popxl.ops as ops
import tremula.embedding
import tremula.lowering
import tremula.popxl
from tremula.lowering import LOWERING_RULES
from tremula.popxl.ops.base import OPS, create_op
from tremula.popxl.ops.elementwise import TABLE

TESTS = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(29)
F32 = np.float32


@pytest.fixture(scope="module", autouse=True)
def _every_op_defined() -> None:
    """Every op definition, wherever it is made (custom ops, the host embedding)."""
    for package in (tremula.popxl, tremula.lowering, tremula.embedding):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)


@dataclass
class Forward:
    """An op type's forward case: its inputs, the NumPy result (arrays -> one array or a
    list), the op's attributes, or a builder (input tensors -> outputs) where the op is not
    made from the inputs and attributes alone."""

    inputs: list[np.ndarray]
    numpy: Callable[..., Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    build: Callable[..., Any] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6


def u(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(F32)


def pos(*shape: int) -> np.ndarray:
    return u(*shape, lo=0.25, hi=2.0)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


_SPECIAL = np.array([[1.5, np.nan, np.inf], [-np.inf, 0.0, -2.0]], F32)
_HALVES = np.array([[-2.5, -1.5, -0.5], [0.5, 1.5, 2.7]], F32)  # ceil / floor / sign at .5
_BOOLS = (np.array([[True, False, True], [False, True, False]]), np.array([True, True, False]))
_A, _B = u(2, 3), u(2, 3)
#: float32 summands (broadcast) whose sums round differently in each order
_SUMMANDS = (
    np.array([[1e8, 1.0, -3.5], [0.1, 2.0**-24, 7.0]], F32),
    np.array([-1e8, 0.3, 3.5], F32),
    np.array([[1.0, 1e8, 0.2]], F32),
)
_TIES = (_A, np.where(RNG.random((2, 3)) < 0.5, _A, _B).astype(F32))  # equal elements too

#: element-wise op type -> inputs and what NumPy gives (float64 where it rounds)
ELEMENTWISE: dict[str, tuple[Sequence[np.ndarray], Callable[..., Any]]] = {
    "Add": ([u(2, 3), u(3)], np.add),
    "Sub": ([u(2, 3), u(2, 1)], np.subtract),
    "Mul": ([u(2, 3), u(1, 3)], np.multiply),
    "Div": ([u(2, 3), pos(3)], lambda a, b: a.astype(np.float64) / b),
    "Pow": ([pos(2, 3), u(2, 3, lo=-1.5, hi=1.5)], lambda a, b: a.astype(np.float64) ** b),
    "Fmod": ([u(2, 3, lo=-5, hi=5), pos(2, 3)], np.fmod),
    "Atan2": ([u(2, 3), u(2, 3)], lambda y, x: np.arctan2(y.astype(np.float64), x)),
    "Max": (_TIES, np.maximum),
    # PopART's SumOp: the left fold of its inputs, broadcast (float32 bits as NumPy's)
    "Sum": (_SUMMANDS, lambda a, b, c: (a + b) + c),
    "Min": (_TIES, np.minimum),
    "Equal": (_TIES, lambda a, b: a == b),
    "Greater": (_TIES, lambda a, b: a > b),
    "Less": (_TIES, lambda a, b: a < b),
    "And": (_BOOLS, lambda a, b: a & b),
    "Or": (_BOOLS, lambda a, b: a | b),
    "Not": (_BOOLS[:1], lambda a: ~a),
    "Neg": ([u(2, 3)], lambda x: -x),
    "Abs": ([u(2, 3)], lambda x: np.where(x < 0, -x, x)),
    "Sqrt": ([pos(2, 3)], lambda x: np.sqrt(x.astype(np.float64))),
    "Exp": ([u(2, 3)], lambda x: np.exp(x.astype(np.float64))),
    "Log": ([pos(2, 3)], lambda x: np.log(x.astype(np.float64))),
    "Log2": ([pos(2, 3)], lambda x: np.log(x.astype(np.float64)) / np.log(2.0)),
    "Sin": ([u(2, 3)], lambda x: np.sin(x.astype(np.float64))),
    "Cos": ([u(2, 3)], lambda x: np.cos(x.astype(np.float64))),
    "Tan": ([u(2, 3, lo=-1.2, hi=1.2)], lambda x: np.tan(x.astype(np.float64))),
    "Asin": ([u(2, 3, lo=-0.95, hi=0.95)], lambda x: np.arcsin(x.astype(np.float64))),
    "Erf": ([u(2, 3)], _erf),
    "Tanh": ([u(2, 3)], lambda x: np.tanh(x.astype(np.float64))),
    "Sigmoid": ([u(2, 3)], _sigmoid),
    "Relu": ([u(2, 3)], lambda x: np.where(x > 0, x, 0)),
    "Gelu": (
        [u(2, 3, lo=-3, hi=3)],
        lambda x: (
            0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(float) ** 3)))
        ),
    ),
    "GeluErf": ([u(2, 3, lo=-3, hi=3)], lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2.0)))),
    "Swish": ([u(2, 3)], lambda x: x * _sigmoid(x)),
    "Ceil": ([_HALVES], lambda x: np.array([[-2, -1, 0], [1, 2, 3]], F32)),
    "Floor": ([_HALVES], lambda x: np.array([[-3, -2, -1], [0, 1, 2]], F32)),
    "Sign": ([_HALVES * np.array([1, 0, 1], F32)], lambda x: (x > 0).astype(F32) - (x < 0)),
    "IsNaN": ([_SPECIAL], lambda x: x != x),
    "IsInf": ([_SPECIAL], lambda x: np.abs(x) == np.inf),
    "IsFinite": ([_SPECIAL], lambda x: np.abs(x) < np.inf),
}


def _on(op_type: str) -> Callable[..., Any]:
    """A builder making ``op_type`` over the inputs, the first a copy (an in-place form
    writes it, and the inputs are the graph's streams' tensors)."""
    return lambda *xs: create_op(op_type, [ops.identity(xs[0]), *xs[1:]])[0]


def _elementwise_cases() -> dict[str, Forward]:
    cases = {}
    for e in TABLE:
        inputs, expected = ELEMENTWISE[e.op]
        cases[e.op] = Forward(list(inputs), expected)
        if e.inplace:
            cases[e.op + "Inplace"] = Forward(list(inputs), expected, build=_on(e.op + "Inplace"))
    return cases


def _copy_var_update(t: popxl.Tensor, x: popxl.Tensor) -> popxl.Tensor:
    return ops.var_updates.copy_var_update_(ops.identity(t), x)


_X23 = u(2, 3)

#: op type -> its forward case, or the node id of the test that checks its forward pass
FORWARD: dict[str, Forward | str] = {
    **_elementwise_cases(),
    "Identity": Forward([_X23], lambda x: x, build=ops.identity),
    "Cast": Forward(
        [np.array([[-2.7, -0.5, 0.5], [1.9, 3.0, 100.2]], F32)],
        lambda x: np.array([[-2, 0, 0], [1, 3, 100]], np.int32),  # truncation toward zero
        build=lambda x: ops.cast(x, popxl.int32),
    ),
    "Init": Forward(
        [], lambda: np.zeros((2, 3), F32), build=lambda: ops.init((2, 3), popxl.float32)
    ),
    "Detach": Forward([_X23], lambda x: x, build=ops.detach),
    "DetachInplace": Forward([_X23], lambda x: x, build=lambda x: ops.detach_(ops.identity(x))),
    "Reshape": Forward([_X23], lambda x: x.reshape(3, 2), build=lambda x: ops.reshape(x, (3, 2))),
    "ReshapeInplace": Forward(
        [_X23],
        lambda x: [x.reshape(3, 2) * 2],  # a view: the write through it reaches its input
        build=lambda x: _write_through(ops.identity(x), lambda c: ops.reshape_(c, (3, 2))),
    ),
    "Transpose": Forward(
        [u(2, 3, 4)], lambda x: x.transpose(2, 0, 1), build=lambda x: ops.transpose(x, (2, 0, 1))
    ),
    "TransposeInplace": Forward(
        [_X23],
        lambda x: [x.T * 2],
        build=lambda x: _write_through(ops.identity(x), ops.transpose_),
    ),
    "CopyVarUpdate": Forward([_X23, u(2, 3)], lambda t, x: x, build=_copy_var_update),
    "RemoteCodeLoad": "tests/popxl/test_popxl_op_tests.py::test_remote_code_load_changes_no_value",
    # calls, loops, branches; streams and remote buffers
    "Call": "tests/popxl/test_popxl_graphs.py::test_listing_9_3_graph_input_and_two_calls",
    "Repeat": "tests/popxl/test_popxl_graphs.py::test_listing_9_5_repeat_is_loop_carried",
    "If": "tests/popxl/test_popxl_ops_control.py::test_conditional_runs_one_branch",
    "HostLoad": "tests/popxl/test_popxl_programs.py::test_host_data_through_to_numpy_and_streams",
    "HostStore": "tests/popxl/test_popxl_programs.py::test_host_data_through_to_numpy_and_streams",
    "RemoteLoad": "tests/popxl/test_popxl_ir_op_classes.py::"
    "test_remote_load_is_a_remote_load_op_and_remote_load_inplace_derives_from_it",
    "RemoteLoadInplace": "tests/popxl/test_popxl_ir_op_classes.py::"
    "test_remote_load_is_a_remote_load_op_and_remote_load_inplace_derives_from_it",
    "RemoteStore": "tests/popxl/test_popxl_ir_op_classes.py::"
    "test_remote_load_is_a_remote_load_op_and_remote_load_inplace_derives_from_it",
    "MultiExchange": "tests/popxl/test_popxl_merge_exchange.py::"
    "test_merged_exchanges_compute_as_numpy",
    "IpuCopy": "tests/popxl/test_popxl_ops_control.py::test_ipu_copy_and_io_tile_copy",
    "IoTileCopy": "tests/popxl/test_popxl_ops_control.py::test_ipu_copy_and_io_tile_copy",
    "PrintTensor": "tests/popxl/test_popxl_ops_control.py::test_print_tensor_prints_at_run_time",
    # tensor ops, gathers and scatters
    "Concat": "tests/popxl/test_popxl_ops_gather.py::test_concat_split_squeeze",
    "ConcatInplace": "tests/popxl/test_popxl_ops_gather.py::test_concat_split_squeeze",
    "Split": "tests/popxl/test_popxl_ops_gather.py::test_concat_split_squeeze",
    "Slice": "tests/popxl/test_popxl_ops_gather.py::test_slice_subsample_and_inplace_slice",
    "SliceInplace": "tests/popxl/test_popxl_ops_gather.py::test_slice_subsample_and_inplace_slice",
    "Subsample": "tests/popxl/test_popxl_ops_gather.py::test_subsample_strides_as_popxl_takes_them",
    "Gather": "tests/popxl/test_popxl_ops_gather.py::test_gather",
    "TiedGather": "tests/popxl/test_popxl_ops_gather.py::test_gather_zero_oor_and_tied_gather",
    "GroupedGather": "tests/popxl/test_popxl_ops_gather.py::test_groupedgather",
    "GroupedGatherGrad": "tests/popxl/test_popxl_ops_gather.py::"
    "test_groupedgather_gradient_is_a_grouped_scatter_add",
    "Scatter": "tests/popxl/test_popxl_ops_gather.py::test_scatter_elements",
    "ScatterReduce": "tests/popxl/test_popxl_ops_gather.py::test_scatter_reduce",
    "DynamicSlice": "tests/popxl/test_popxl_ops_gather.py::test_dynamic_slice_and_update",
    "DynamicUpdate": "tests/popxl/test_popxl_ops_gather.py::test_dynamic_slice_and_update",
    "DynamicUpdateInplace": "tests/popxl/test_popxl_ops_gather.py::test_dynamic_slice_and_update",
    "OneHot": "tests/popxl/test_popxl_ops_gather.py::test_onehot",
    "Where": "tests/popxl/test_popxl_ops_misc.py::test_where_broadcasts_and_coerces",
    "Clip": "tests/popxl/test_popxl_ops_misc.py::test_clip_and_clamp",
    "ScaledAdd": "tests/popxl/test_popxl_ops_misc.py::test_scaled_add",
    "ScaledAddInplace": "tests/popxl/test_popxl_ops_misc.py::test_scaled_add",
    "IncrementMod": "tests/popxl/test_popxl_ops_misc.py::test_increment_mod",
    "IncrementModInplace": "tests/popxl/test_popxl_ops_misc.py::test_increment_mod",
    # reductions
    **dict.fromkeys(
        [
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        ],
        "tests/popxl/test_popxl_ops_reduce.py::test_reductions_float32",
    ),
    "ReduceMedian": "tests/popxl/test_popxl_ops_reduce.py::test_median_is_the_lower_median",
    "ArgMax": "tests/popxl/test_popxl_ops_reduce.py::test_argmax_argmin",
    "ArgMin": "tests/popxl/test_popxl_ops_reduce.py::test_argmax_argmin",
    "TopK": "tests/popxl/test_popxl_ops_reduce.py::test_topk",
    "CumSum": "tests/popxl/test_popxl_ops_reduce.py::test_cumsum",
    "Histogram": "tests/popxl/test_popxl_ops_reduce.py::test_histogram",
    "LambSquare": "tests/popxl/test_popxl_ops_reduce.py::test_lamb_square",
    # matmul, convolutions, pooling, resizing, float8
    "MatMul": "tests/popxl/test_popxl_matmul_variants.py::test_matmul_matches_numpy",
    "Conv": "tests/popxl/test_popxl_ops_conv.py::test_conv2d",
    "ConvTranspose": "tests/popxl/test_popxl_ops_conv.py::test_conv_transpose",
    "MaxPool": "tests/popxl/test_popxl_ops_conv.py::test_pools",
    "AveragePool": "tests/popxl/test_popxl_ops_conv.py::test_pools",
    "Resize": "tests/popxl/test_popxl_ops_conv.py::test_interpolate",
    "RoiAlign": "tests/popxl/test_popxl_ops_roi_align.py::test_hand_computed_values",
    "RoiAlignGrad": "tests/popxl/test_popxl_ops_roi_align.py::test_hand_computed_gradient",
    "Pow2ScaleCastToFp8": "tests/popxl/test_popxl_ops_fp8.py::"
    "test_cast_to_fp8_matches_the_host_cast_bit_for_bit",
    "Pow2ScaleCastFromFp8": "tests/popxl/test_popxl_ops_fp8.py::"
    "test_cast_from_fp8_matches_the_host_cast_for_every_code",
    "MatMulPow2Scaled": "tests/popxl/test_popxl_ops_fp8.py::"
    "test_matmul_pow2scaled_equals_the_float64_product_of_the_decoded_values",
    "ConvPow2Scaled": "tests/popxl/test_popxl_ops_fp8.py::test_conv_pow2scaled",
    "ConvTransposePow2Scaled": "tests/popxl/test_popxl_ops_fp8.py::test_conv_transpose_pow2scaled",
    # nn, random, rnn, sparse
    "Softmax": "tests/popxl/test_popxl_ops_nn.py::test_softmax",
    "Nll": "tests/popxl/test_popxl_ops_nn.py::test_nll_loss",
    "NllWithSoftmaxGrad": "tests/popxl/test_popxl_ops_nn.py::test_nll_loss_with_softmax_grad",
    "GroupNorm": "tests/popxl/test_popxl_ops_nn.py::test_group_norm",
    "BatchNormInference": "tests/popxl/test_popxl_ops_nn.py::test_batch_norm_inference",
    "RandomUniform": "tests/popxl/test_popxl_ops_random.py::test_random_uniform_and_normal",
    "RandomNormal": "tests/popxl/test_popxl_ops_random.py::test_random_uniform_and_normal",
    "Dropout": "tests/popxl/test_popxl_ops_random.py::test_dropout",
    "ShapedDropout": "tests/popxl/test_popxl_ops_random.py::test_dropout",
    "SplitRandomSeed": "tests/popxl/test_popxl_ops_random.py::test_split_random_seed",
    "Gru": "tests/popxl/test_popxl_rnn.py::test_gru_outputs_and_gradients_match_numpy",
    "GruGrad": "tests/popxl/test_popxl_rnn.py::test_gru_outputs_and_gradients_match_numpy",
    **dict.fromkeys(
        ["SparseFullyConnected", "SparseFullyConnectedGradA", "SparseFullyConnectedGradW"],
        "tests/popxl/test_popxl_sparse.py::test_forward_grad_a_grad_w_match_dense_numpy",
    ),
    # variable updates
    "Accumulate": "tests/popxl/test_popxl_var_updates.py::test_accumulators_match_numpy",
    "AccumulatorScale": "tests/popxl/test_popxl_var_updates.py::test_accumulator_scale_and_zero",
    "SparseAccumulate": "tests/popxl/test_popxl_var_updates.py::test_sparse_accumulate",
    "AdamUpdater": "tests/popxl/test_popxl_var_updates_optimisers.py::"
    "test_updater_matches_numpy_over_steps",
    "AdamVarUpdate": "tests/popxl/test_popxl_var_updates_optimisers.py::"
    "test_adam_var_update_trust_ratio",
    # collectives
    "AllReduce": "tests/popxl/test_popxl_collectives_across_ipus.py::test_all_reduce_matches_numpy",
    **dict.fromkeys(
        [
            "ReplicatedAllReduce",
            "ReplicatedAllReduceInplace",
            "ReplicatedAllGather",
            "ReplicatedReduceScatter",
            "ReplicatedSlice",
        ],
        "tests/popxl/test_popxl_replication_collectives.py::test_collectives_match_numpy_per_group",
    ),
    # popxl-addons' collectives (C++ custom ops served with op types of their own)
    "ReplicatedAllGatherStrided": "tests/addons/test_addons_collectives.py::"
    "test_all_gather_strided",
    "ReplicatedReduceScatterStrided": "tests/addons/test_addons_collectives.py::"
    "test_reduce_scatter_strided",
    **dict.fromkeys(
        ["ReplicatedAllReduceStrided", "ReplicatedAllReduceTP"],
        "tests/addons/test_addons_collectives.py::test_all_reduce_strided_and_its_gradient",
    ),
    # ops defined above PopXL: the host embedding, popxl-addons' custom ops
    "HostEmbeddingLookup": "tests/embedding/test_embedding_host.py::"
    "test_lookups_and_sgd_updates_match_numpy_exactly",
    "HostEmbeddingUpdate": "tests/embedding/test_embedding_host.py::"
    "test_lookups_and_sgd_updates_match_numpy_exactly",
    **dict.fromkeys(
        ["CrossEntropySharded", "CrossEntropyShardedGrad"],
        "tests/popxl/custom_ops/test_cross_entropy_sharded_loss.py::"
        "test_loss_and_gradient_over_sharded_classes",
    ),
    **dict.fromkeys(
        ["CrossEntropyShardedWR", "CrossEntropyShardedGradWR"],
        "tests/popxl/custom_ops/test_cross_entropy_sharded_wr_loss.py::"
        "test_loss_and_gradients_per_shard",
    ),
    **dict.fromkeys(
        ["LayerNormDistributed", "LayerNormDistributedGrad"],
        "tests/popxl/custom_ops/test_layer_norm_distributed.py::"
        "test_forward_and_gradients_match_the_cpp_semantics_over_each_group",
    ),
    "RotaryPosEmbed": "tests/popxl/custom_ops/test_rotary_pos_embed.py::"
    "test_forward_through_the_binding",
    "RotaryPosEmbedGrad": "tests/popxl/custom_ops/test_rotary_pos_embed.py::"
    "test_the_wrapper_as_gptj_calls_it_and_its_gradient",
    "GradReduceSquareAdd": "tests/popxl/custom_ops/test_grad_reduce_square_add.py::"
    "test_the_scaled_sum_of_squares_per_replica",
    "GroupQuantizeDecompress": "tests/popxl/custom_ops/test_group_quantize_decompress.py::"
    "test_every_nibble_value_in_every_position_through_the_binding",
    "LinearLayout": "tests/popxl/custom_ops/test_linear_layout.py::test_the_wrapper_copies_values",
    "SparseMatmul": "tests/popxl/custom_ops/test_static_sparse_ops.py::"
    "test_dense_times_constant_sparse",
    "Fp8Scale": "tests/popxl/custom_ops/test_fp8_mse_scale.py::"
    "test_scaling_biases_through_the_wrapper",
}

#: op type -> the test that checks its gradient rule, where no finite-difference case of
#: ``test_popxl_autodiff_rules.py`` does (and why)
GRADIENT_TESTS: dict[str, str] = {
    # calls and branches: their rules differentiate the called graphs; Repeat's refuses
    "Call": "tests/popxl/test_popxl_autodiff_graphs.py::"
    "test_nested_calls_are_differentiated_recursively",
    "Repeat": "tests/popxl/test_popxl_autodiff_graphs.py::"
    "test_repeat_inside_is_not_supported_and_rolls_back",
    "If": "tests/popxl/test_popxl_autodiff_graphs.py::"
    "test_conditional_is_differentiated_through_both_branches",
    # a rule that refuses, as PopART's grad op of the inference form cannot be made
    "BatchNormInference": "tests/popxl/test_popxl_ops_nn.py::"
    "test_batch_norm_inference_refuses_autodiff",
    # collectives over replicas: their rules are PopART's conventions
    **dict.fromkeys(
        ["ReplicatedAllGather", "ReplicatedReduceScatter", "ReplicatedSlice"],
        "tests/popxl/test_popxl_autodiff_collectives.py::test_collective_gradients_follow_popart",
    ),
    # popxl-addons' all-reduces: their C++ grad op (the flags swapped)
    **dict.fromkeys(
        ["ReplicatedAllReduceStrided", "ReplicatedAllReduceTP"],
        "tests/addons/test_addons_collectives.py::test_all_reduce_strided_and_its_gradient",
    ),
    # across IPUs: the plain form's rule against its derivative
    "AllReduce": "tests/popxl/test_popxl_collectives_across_ipus.py::test_gradients_swap_the_flags",
    # random: the gradient applies the forward mask
    "Dropout": "tests/popxl/test_popxl_autodiff_rules.py::"
    "test_dropout_gradient_applies_the_forward_mask",
    "ShapedDropout": "tests/popxl/test_popxl_autodiff_rules.py::"
    "test_dropout_gradient_applies_the_forward_mask",
    # PopSparse: the inputs are host data of the partitioner
    **dict.fromkeys(
        ["SparseFullyConnected", "SparseFullyConnectedGradA", "SparseFullyConnectedGradW"],
        "tests/popxl/test_popxl_sparse.py::"
        "test_autodiff_of_grad_a_and_grad_w_matches_finite_differences",
    ),
    # the lookup's rule sends the gradient to the table's optimizer
    "HostEmbeddingLookup": "tests/embedding/test_embedding_host.py::"
    "test_lookups_and_sgd_updates_match_numpy_exactly",
    # popnn's GRU: its NumPy backward against finite differences
    "Gru": "tests/popxl/test_popxl_rnn.py::test_gru_outputs_and_gradients_match_numpy",
    # popxl-addons' ops over replica groups / IPUs: closed forms
    "LayerNormDistributed": "tests/popxl/custom_ops/test_layer_norm_distributed.py::"
    "test_forward_and_gradients_match_the_cpp_semantics_over_each_group",
    "CrossEntropySharded": "tests/popxl/custom_ops/test_cross_entropy_sharded_loss.py::"
    "test_loss_and_gradient_over_sharded_classes",
    "CrossEntropyShardedWR": "tests/popxl/custom_ops/test_cross_entropy_sharded_wr_loss.py::"
    "test_loss_and_gradients_per_shard",
    "RotaryPosEmbed": "tests/popxl/custom_ops/test_rotary_pos_embed.py::"
    "test_the_wrapper_as_gptj_calls_it_and_its_gradient",
}


def _write_through(t: popxl.Tensor, view: Callable[[popxl.Tensor], popxl.Tensor]) -> list:
    """A view of ``t`` doubled in place: the view's value (``t`` changes with it)."""
    v = view(t)
    ops.mul_(v, popxl.constant(np.array(2.0, F32)))
    return [ops.identity(v)]


# ---- the forward cases ----

CASES = {t: c for t, c in FORWARD.items() if isinstance(c, Forward)}


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_forward_case(op_type: str) -> None:
    case = CASES[op_type]

    def build(*xs: popxl.Tensor) -> Any:
        if case.build is not None:
            return case.build(*xs)
        return create_op(op_type, list(xs), case.attrs)[0]

    ir, _, _ = evaluator.graph(build, *case.inputs)
    made = {op.type for graph in ir.graphs for op in graph.ops}
    assert op_type in made, f"the case of {op_type} makes no {op_type} op: {sorted(made)}"
    expected = case.numpy(*case.inputs)
    evaluator.check(build, expected, *case.inputs, rtol=case.rtol, atol=case.atol)


def test_remote_code_load_changes_no_value() -> None:
    """Loading a graph's code from streaming memory, then calling the graph: the call's
    result is the graph's (PopXL's ``remote_code_load`` moves code, not values)."""
    x = u(2, 3)

    def build(t: popxl.Tensor) -> popxl.Tensor:
        g = t.graph.ir.create_graph(lambda a: a * 2.0 + 1.0, t)
        ops.remote_code_load(g, "executable")
        return ops.call(g, t)[0]

    ir, feeds, outs = evaluator.graph(build, x)
    assert [op.type for op in ir.main_graph.ops].count("RemoteCodeLoad") == 1
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run(feeds)
    np.testing.assert_allclose(got[outs[0]], x.astype(np.float64) * 2 + 1, rtol=1e-6)


# ---- the linked tests ----


@functools.cache
def _test_functions(path: str) -> frozenset[str]:
    """The test functions defined at the top of a test file (read, not imported: some need
    client code that may be absent)."""
    file = TESTS.parent / path
    assert file.is_file(), f"no test file {path}"
    tree = ast.parse(file.read_text(), str(file))
    return frozenset(
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    )


def _check_node_id(node_id: str) -> None:
    path, sep, name = node_id.partition("::")
    assert sep and path.startswith("tests/") and path.endswith(".py"), node_id
    assert name in _test_functions(path), f"{node_id}: no such test function"


def test_every_linked_forward_test_exists() -> None:
    links = sorted({c for c in FORWARD.values() if isinstance(c, str)})
    assert len(links) > 50
    for node_id in links:
        _check_node_id(node_id)


def test_every_linked_gradient_test_exists() -> None:
    for node_id in sorted(set(GRADIENT_TESTS.values())):
        _check_node_id(node_id)


# ---- completeness: walk the definitions ----


def _forward_entry(op_type: str) -> Forward | str | None:
    if op_type in FORWARD:
        return FORWARD[op_type]
    d = OPS[op_type]
    if d.inplace_of and LOWERING_RULES[op_type] is LOWERING_RULES[d.inplace_of]:
        return _forward_entry(d.inplace_of)  # the same lowering runs: covered through it
    return None


def test_every_op_type_has_a_forward_test() -> None:
    missing = sorted(t for t in OPS if _forward_entry(t) is None)
    assert not missing, (
        f"op types without a forward test (add a Forward case or the node id of the test "
        f"that checks it to FORWARD in {Path(__file__).name}): {missing}"
    )
    stale = sorted(set(FORWARD) - set(OPS))
    assert not stale, f"FORWARD names op types no one defines: {stale}"


def _autodiff_rule_cases() -> ModuleType:
    """``test_popxl_autodiff_rules.py`` (its ``ALL_CASES``), loaded by path."""
    path = Path(__file__).with_name("test_popxl_autodiff_rules.py")
    name = "tremula_tests_autodiff_rule_cases"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_every_gradient_rule_has_a_gradient_test() -> None:
    """In-place forms share their out-of-place op's rule (``OpDefinition.grad``): the rules
    to test are those of out-of-place ops."""
    cases = _autodiff_rule_cases().ALL_CASES
    with_rules = {t for t, d in OPS.items() if d.grad is not None and not d.inplace_of}
    by_case = {name.split("/")[0] for name in cases}
    missing = sorted(with_rules - by_case - set(GRADIENT_TESTS))
    assert not missing, (
        f"gradient rules without a test (a finite-difference case in "
        f"test_popxl_autodiff_rules.py, or a node id in GRADIENT_TESTS): {missing}"
    )
    stale = sorted(t for t in GRADIENT_TESTS if t not in with_rules)
    assert not stale, f"GRADIENT_TESTS names op types without a gradient rule: {stale}"
    doubled = sorted(set(GRADIENT_TESTS) & by_case)
    assert not doubled, f"GRADIENT_TESTS links op types that have a case already: {doubled}"
