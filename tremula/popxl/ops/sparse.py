"""``popxl.ops.sparse``: PopSparse's dynamic sparse fully-connected layer as PopXL ops.

This is a Tremula extension: PopXL has no sparse layer. The weights of the layer are the two
tensors of ``popsparse::dynamic``'s ``SparseTensor``, held by ordinary PopXL variables (or
graph inputs): ``meta_info`` (uint16, the pattern encoded into buckets) and ``nz_values``
(the non-zero values, laid out as the buckets). The host partitioner makes both from a
COO / CSR / CSC matrix (``tremula/libs/popsparse/OVERVIEW.md``)::

    from tremula.libs.popsparse import COOMatrix, dynamic
    import popxl.ops as ops

    params = dynamic.FullyConnectedParams.create_with_nz_ratio(
        dynamic.SparsityParams(), 0.1, batch, 1, n_in, n_out)
    options = {"doGradAPass": True, "doGradWPass": True}
    part = ops.sparse.partitioner(params, options, device="ipu_model")
    impl = part.create_sparsity_data_impl(COOMatrix(values, rows, cols))
    with ir.main_graph:
        meta_info = popxl.variable(impl.meta_info, popxl.uint16)
        nz_values = popxl.variable(impl.nz_values, popxl.float32)
        y = ops.sparse.fully_connected(x, meta_info, nz_values, params, options)

``y = x W^T`` where ``W[out][in]`` is the sparse matrix the buckets hold. Autodiff gives
``x`` its gradient through PopSparse's GradA pass and ``nz_values`` a gradient laid out like
``nz_values`` (the sparse GradW pass: one value per non-zero, so an SGD update is a plain
``scaled_add_``); ``meta_info`` gets none. A new pattern with the same number of non-zeros
is new host data for the same two variables: ``session.write_variable_data`` swaps it in
and the compiled program runs it, with no recompilation (bucket sizes are fixed by the
plan, not by the pattern).

The layout of the buckets depends on the plan, and so on the machine: the host data must be
partitioned for the device the Session compiles for (``device``, the Session's device name
or a :class:`tremula.target.Target`). The op records the plan; the lowering checks that the
Session's target gives the same plan.

Op types (their inputs in order): ``SparseFullyConnected`` (x, meta_info, nz_values) ->
``[batch, out]``; ``SparseFullyConnectedGradA`` (grad_out, meta_info, nz_values) ->
``[batch, in]``; ``SparseFullyConnectedGradW`` (meta_info, grad_out, x) -> like
``nz_values``. Each records ``params``, the parsed ``options`` and the ``plan``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import target as targets
from tremula.popxl import dtypes
from tremula.popxl.context import make_atomic
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec
from tremula.target import Target

if TYPE_CHECKING:  # PopSparse (and SciPy) load on the first sparse layer, not with popxl
    from tremula.libs.popsparse import dynamic
    from tremula.libs.popsparse.options import Options

WHAT = "sparse.fully_connected"
#: the data types of the layer (PopSparse's half and float)
DATA_TYPES = (dtypes.float32, dtypes.float16)


# ---- the target, the plan and the host partitioner ----


def target_of(device: str | Target = "ipu_model") -> Target:
    """The target a ``popxl.Session(ir, device)`` compiles for, as far as the sparse layer's
    plan goes: ``"cpu"`` is Poplar's one-tile CPU target; ``"ipu_model"`` and ``"ipu_hw"``
    are the Mk2 IPU Model (1472 tiles per IPU). A :class:`Target` is returned as it is.

    Raises:
        ValueError: another device name.
    """
    if isinstance(device, Target):
        return device
    if device == "cpu":
        return targets.cpu()
    if device in ("ipu_model", "ipu_hw"):
        return targets.ipu2()
    raise ValueError(
        f"{WHAT}: device must be 'ipu_model', 'ipu_hw', 'cpu' or a tremula Target, got {device!r}"
    )


def partitioner(
    params: dynamic.FullyConnectedParams,
    options: Mapping[str, Any] | Options | None = None,
    device: str | Target = "ipu_model",
    dtype: dtypes.dtype = dtypes.float32,
) -> dynamic.Partitioner:
    """The host partitioner for a layer made by :func:`fully_connected` with the same
    ``params``, ``options`` and ``device``: its ``create_sparsity_data_impl(matrix)`` gives
    the ``meta_info`` and ``nz_values`` arrays, ``sparsity_data_impl_to_coo_matrix`` and
    ``grad_w_to_coo_matrix`` read them (and GradW results) back."""
    from tremula.libs.popsparse import dynamic

    return dynamic.Partitioner(params, _data_type(dtype), target_of(device), options)


def _data_type(dtype: dtypes.dtype) -> str:
    if dtype not in DATA_TYPES:
        raise TypeError(f"{WHAT}: the data type must be float32 or float16, got {dtype}")
    return "float" if dtype == dtypes.float32 else "half"


def plan_of(
    params: Any,
    options: Mapping[str, Any] | Options | None,
    device: str | Target,
    dtype: dtypes.dtype,
) -> dynamic.Plan:
    """The plan of the layer (``PopsparseError``, a ``ValueError``, for bad params or
    options; ``TypeError`` for params that are not ``FullyConnectedParams``)."""
    from tremula.libs.popsparse import dynamic

    if not isinstance(params, dynamic.FullyConnectedParams):
        raise TypeError(
            f"{WHAT}: params must be popsparse dynamic.FullyConnectedParams, got "
            f"{type(params).__name__}"
        )
    opts = dynamic.parse_options(options, WHAT)
    return dynamic.get_plan(target_of(device), _data_type(dtype), params, opts)


# ---- NumPy references: the buckets read back to a dense matrix ----


def slots(plan: dynamic.Plan, meta_info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element (row, column) of every ``nz_values`` slot, -1 for padding (host decoder)."""
    from tremula.libs.popsparse import decoding

    return decoding.slot_coordinates(plan, np.asarray(meta_info).astype(np.uint16))


def dense_weights(plan: dynamic.Plan, meta_info: np.ndarray, nz_values: np.ndarray) -> np.ndarray:
    """``W[out][in]`` (float64) that ``meta_info`` and ``nz_values`` encode."""
    rows, cols = slots(plan, meta_info)
    used = rows >= 0
    out, in_, _ = plan.params.shape
    w = np.zeros((out, in_), np.float64)
    np.add.at(w, (rows[used], cols[used]), np.asarray(nz_values, np.float64)[used])
    return w


def _fwd_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    act, meta, nz = x
    w = dense_weights(a["plan"], meta, nz)
    return [(act.astype(np.float64) @ w.T).astype(act.dtype)]


def _grad_a_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    g, meta, nz = x
    w = dense_weights(a["plan"], meta, nz)
    return [(g.astype(np.float64) @ w).astype(g.dtype)]


def _grad_w_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    meta, g, act = x
    rows, cols = slots(a["plan"], meta)
    used = rows >= 0
    out = np.zeros(rows.shape, np.float64)  # padding slots: 0 (meaningless on the device)
    g64, act64 = g.astype(np.float64), act.astype(np.float64)
    out[used] = np.einsum("bk,bk->k", g64[:, rows[used]], act64[:, cols[used]])
    return [out.astype(g.dtype)]


def _shape(a: dict[str, Any]) -> tuple[int, int, int]:
    return a["params"].shape  # (out = X, in = Y, batch = Z)


def _fwd_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    out, _, batch = _shape(a)
    return [TensorSpec((batch, out), specs[0].dtype)]


def _grad_a_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    _, in_, batch = _shape(a)
    return [TensorSpec((batch, in_), specs[0].dtype)]


def _grad_w_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec((a["plan"].nz_elems,), specs[1].dtype)]


defop("SparseFullyConnected", _fwd_spec, _fwd_ref)
#: the input gradient: ``grad_out [batch, out]`` times ``W`` (PopSparse's GradA pass)
defop("SparseFullyConnectedGradA", _grad_a_spec, _grad_a_ref)
#: the weights' gradient at the pattern's positions, laid out like ``nz_values``
defop("SparseFullyConnectedGradW", _grad_w_spec, _grad_w_ref)


# ---- checks ----


def _check_weights(meta_info: Any, nz_values: Any, plan: dynamic.Plan) -> None:
    check_tensor(meta_info, WHAT, "meta_info")
    check_tensor(nz_values, WHAT, "nz_values")
    if meta_info.dtype != dtypes.uint16:
        raise TypeError(f"{WHAT}: meta_info {meta_info.id!r} must be uint16, got {meta_info.dtype}")
    for t, name, n in (
        (meta_info, "meta_info", plan.meta_info_elems),
        (nz_values, "nz_values", plan.nz_elems),
    ):
        if t.shape != (n,):
            raise ValueError(
                f"{WHAT}: {name} {t.id!r} must have shape ({n},) for this layer's plan "
                f"({plan.num_buckets} buckets on {plan.tiles_per_ipu} tiles), got {t.shape}; "
                f"make the host arrays with ops.sparse.partitioner(params, options, device) "
                f"with the same params, options and device"
            )


def check_layer(
    x: Any,
    meta_info: Any,
    nz_values: Any,
    params: Any,
    options: Mapping[str, Any] | Options | None,
    device: str | Target,
) -> dict[str, Any]:
    """Check the arguments of :func:`fully_connected`; returns the op attributes (the
    params, the parsed options and the plan)."""
    check_tensor(x, WHAT, "x")
    if x.dtype not in DATA_TYPES:
        raise TypeError(f"{WHAT}: x {x.id!r} must be float32 or float16, got {x.dtype}")
    plan = plan_of(params, options, device, x.dtype)
    _check_weights(meta_info, nz_values, plan)
    if nz_values.dtype != x.dtype:
        raise TypeError(
            f"{WHAT}: nz_values {nz_values.id!r} must have the dtype of x {x.id!r} "
            f"({x.dtype}), got {nz_values.dtype}"
        )
    want = (params.batch_size, params.input_channels)
    if x.shape != want:
        raise ValueError(
            f"{WHAT}: x {x.id!r} must be [batch, input channels] = {list(want)} for params "
            f"{params}, got shape {x.shape}"
        )
    return {"params": params, "options": plan.options, "plan": plan}


# ---- the op ----


def fully_connected(
    x: Tensor,
    meta_info: Tensor,
    nz_values: Tensor,
    params: dynamic.FullyConnectedParams,
    options: Mapping[str, Any] | None = None,
    device: str | Target = "ipu_model",
) -> Tensor:
    """A dynamic sparse fully-connected layer: ``x [batch, in] -> [batch, out]``, ``x W^T``
    with the sparse weights ``W[out][in]`` that ``meta_info`` and ``nz_values`` encode
    (PopSparse's ``fullyConnectedFwd``).

    Args:
        x: ``[batch, in]`` float32 or float16 activations (batch and in from ``params``).
        meta_info: uint16 ``[plan.meta_info_elems]``: the pattern, as the partitioner's
            ``SparsityDataImpl.meta_info``.
        nz_values: ``[plan.nz_elems]`` of ``x``'s dtype: the values, as its ``nz_values``.
        params: the layer's ``dynamic.FullyConnectedParams`` (batch, in, out, block size,
            the density the buckets are sized for).
        options: PopSparse's options (PopLibs names; the partitioner must be given the same).
            Differentiating needs ``doGradAPass`` (for ``x``) and ``doGradWPass`` (for
            ``nz_values``: the meta-info then holds the GradW work split).
        device: the Session device the host data are partitioned for (``"ipu_model"``,
            ``"cpu"``, ``"ipu_hw"``) or a ``tremula.target.Target``.

    Returns:
        ``[batch, out]`` of ``x``'s dtype.

    Raises:
        TypeError: a non-tensor argument, ``x`` not float32 / float16, ``meta_info`` not
            uint16, ``nz_values`` not of ``x``'s dtype, params not ``FullyConnectedParams``.
        ValueError: shapes that are not those of the plan of ``params`` and ``options`` on
            ``device``, ``x`` not ``[batch, in]``, bad options or params (PopsparseError).
    """
    attrs = check_layer(x, meta_info, nz_values, params, options, device)
    (out,) = create_op("SparseFullyConnected", [x, meta_info, nz_values], attrs)
    return out


__all__ = ["fully_connected", "partitioner", "target_of"]

make_atomic(globals(), ["fully_connected"])  # a refused call adds nothing (see popxl.ops)
