"""All-reduce across the IPUs of one replica (PopXL's ``ops/collectives/all_reduce.py``):
tensors of one shape and dtype, each on its own IPU, reduced so that output ``i``, on IPU
``ipus[i]``, holds the reduction of all of them. No replication is involved.

``all_reduce_identical_inputs`` declares the inputs identical: the forward pass is an
identity (PopART's AllReduceToIdentity pattern) and the backward pass an all-reduce.
``all_reduce_identical_grad_inputs`` declares the gradients identical: forward all-reduce,
backward identity. A plain ``all_reduce`` is an all-reduce both ways. Only ``"add"`` has a
gradient (PopART's ``AllReduceOp`` swaps the two flags in its grad op).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, UndefinedValue
from tremula.popxl.context import get_current_graph
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.collectives.collectives import check_dtype, check_op, reduce_stack
from tremula.popxl.ops.utils import check_in_graph
from tremula.popxl.tensor import Tensor, TensorSpec


def _infer(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    for i, s in enumerate(specs):
        if (s.shape, s.dtype) != (specs[0].shape, specs[0].dtype):
            raise OpSetupError(
                f"AllReduceOp: input {i} ({s.dtype} {s.shape}) does not have the TensorInfo of "
                f"input 0 ({specs[0].dtype} {specs[0].shape}); all inputs must be alike"
            )
    return [TensorSpec(s.shape, s.dtype) for s in specs]


def _ref(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    if attrs["identical_inputs"]:
        return [np.array(a) for a in arrays]
    total = reduce_stack(np.stack([np.asarray(a) for a in arrays])[None], attrs["op"])[0]
    return [np.array(total) for _ in arrays]


defop("AllReduce", _infer, _ref)


def create_all_reduce(
    ts: Sequence[Tensor], ipus: Sequence[int], op: str, identical_inputs: bool, grad_inputs: bool
) -> list[Tensor]:
    """The ``AllReduce`` op over checked arguments; output ``i`` is placed on ``ipus[i]``
    (the op itself spans the IPUs)."""
    attrs = {
        "op": op,
        "ipus": tuple(ipus),
        "identical_inputs": identical_inputs,
        "identical_grad_inputs": grad_inputs,
    }
    outs = create_op("AllReduce", list(ts), attrs, [f"all_reduce_out{i}" for i in range(len(ts))])
    producer = outs[0].producer
    assert producer is not None
    producer.ipu = None  # it spans the IPUs: Op.ipu_of gives each input and output its own
    for t, ipu in zip(outs, ipus):
        t._ipu = ipu
    return list(outs)


def _all_reduce(
    what: str,
    ts: Sequence[Tensor],
    ipus: Sequence[int] | None,
    op: str,
    identical_inputs: bool = False,
    identical_grad_inputs: bool = False,
) -> list[Tensor]:
    op = check_op(op)
    if isinstance(ts, Tensor) or not isinstance(ts, Sequence):
        raise TypeError(f"{what}: ts must be a list of Tensors, got {type(ts).__name__}")
    check_in_graph(get_current_graph(), **{f"ts_{i}": t for i, t in enumerate(ts)})
    if ipus is None:
        try:
            ipus = [t.ipu for t in ts]
        except UndefinedValue as err:
            raise ValueError(
                "Could not automatically infer the IPU of all input Tensors `ts`. Please "
                f"specify the IPUs via the `ipus` parameter. ({err})"
            ) from None
    ipus = [int(i) for i in ipus]
    if len(ts) != len(ipus):
        raise ValueError(
            "Number of specified tensor does not equal number of specified IPUs. "
            f"{len(ts)} != {len(ipus)}"
        )
    if not ts:
        raise OpSetupError(f"{what}: AllReduceOp needs at least one input")
    if min(ipus) < 0:
        raise ValueError(f"{what}: IPUs must be >= 0, got {ipus}")
    check_dtype(ts[0], op, what)
    return create_all_reduce(ts, ipus, op, identical_inputs, identical_grad_inputs)


def all_reduce(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """Reduce ``ts`` across IPUs: output ``i`` (on IPU ``ipus[i]``) is the reduction of all
    inputs.

    Args:
        ts: tensors of one shape and dtype.
        ipus: the IPU of each tensor (default: each tensor's ``ipu``).
        op: ``"add"``, ``"mean"``, ``"mul"`` (reduced as ``"mean"``, as in PopXL),
            ``"min"``, ``"max"``, ``"and"``, ``"or"`` or ``"square_add"``.

    Returns:
        One tensor per input.

    Raises:
        ValueError: an unknown op, IPUs that cannot be inferred, as many IPUs as tensors
            missing, a tensor of another graph.
        TypeError: ``ts`` not a list of Tensors, an op that does not apply to the dtype.
        popart.popart_exception: (also a ``ValueError``) no tensors, or tensors of
            different shapes or dtypes.
    """
    return _all_reduce("all_reduce", ts, ipus, op)


def all_reduce_identical_inputs(
    ts: list[Tensor], ipus: list[int] | None = None, op: str = "add"
) -> list[Tensor]:
    """:func:`all_reduce` of inputs known to be identical: each output is its input (no
    exchange); the gradient is the all-reduce of the gradients. Arguments and errors as
    :func:`all_reduce`."""
    return _all_reduce("all_reduce_identical_inputs", ts, ipus, op, identical_inputs=True)


def all_reduce_identical_grad_inputs(
    ts: list[Tensor], ipus: list[int] | None = None, op: str = "add"
) -> list[Tensor]:
    """:func:`all_reduce` whose gradients are known to be identical: the gradient of each
    input is its output's gradient. Arguments and errors as :func:`all_reduce`."""
    return _all_reduce("all_reduce_identical_grad_inputs", ts, ipus, op, identical_grad_inputs=True)
