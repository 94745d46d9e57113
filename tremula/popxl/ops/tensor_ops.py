"""Matmul, shape and identity ops, ``init``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import check_in_current_graph, create_op, definplace, defop
from tremula.popxl.ops.elementwise import broadcast_shape
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.ops.utils import check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor, TensorSpec


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise OpSetupError("matmul: operands must have at least one dimension")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise OpSetupError(
            f"MatMulOp contracting dimensions unequal: lhs '{list(a)}', rhs '{list(b)}' "
            f"({a2[-1]} != {b2[-2]})"
        )
    batch = broadcast_shape([a2[:-2], b2[:-2]], "matmul")
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _infer_matmul(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    a, b = specs
    if a.dtype != b.dtype:
        raise OpSetupTypeError(f"matmul: operand dtypes differ: {a.dtype} and {b.dtype}")
    out_type = attrs.get("output_type") or a.dtype
    return [TensorSpec(_matmul_shape(a.shape, b.shape), out_type)]


def _same(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [specs[0]]


def _reshape_spec(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(attrs["shape"], specs[0].dtype)]


def _transpose_spec(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    perm = attrs["permutation"]
    return [TensorSpec(tuple(specs[0].shape[p] for p in perm), specs[0].dtype)]


def _slice_spec(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    shape = np.empty(specs[0].shape, dtype=np.bool_)[attrs["key"]].shape
    return [TensorSpec(shape, specs[0].dtype)]


defop("MatMul", _infer_matmul, lambda x, a: [np.matmul(*x)], out="matmul_out")
defop("Identity", _same, lambda x, a: [np.array(x[0])])
defop("Detach", _same, lambda x, a: [np.array(x[0])], differentiable=False)
# detach_: its output aliases its input (PopART's DetachInplaceOp; nothing is written)
defop(
    "DetachInplace",
    _same,
    lambda x, a: [x[0]],
    differentiable=False,
    inplace_of="Detach",
    view=True,
)
defop("Reshape", _reshape_spec, lambda x, a: [np.reshape(x[0], a["shape"])])
definplace("ReshapeInplace", "Reshape", view=True)
defop("Transpose", _transpose_spec, lambda x, a: [np.transpose(x[0], a["permutation"])])
definplace("TransposeInplace", "Transpose", view=True)
defop("Slice", _slice_spec, lambda x, a: [np.array(x[0][a["key"]])])
definplace("SliceInplace", "Slice", view=True)
defop(
    "Init",
    lambda specs, a: [TensorSpec(a["shape"], a["dtype"], a.get("meta_shape", ()))],
    lambda x, a: [np.zeros(a["shape"], a["dtype"].as_numpy())],  # "undef": any value will do
    differentiable=False,
)
defop(
    "Cast",
    lambda specs, a: [TensorSpec(specs[0].shape, a["dtype"])],
    lambda x, a: [x[0].astype(a["dtype"].as_numpy())],
)


def matmul(
    lhs: Tensor,
    rhs: Tensor,
    available_memory_proportion: float | None = None,
    output_type: dtypes.dtype | None = None,
    partials_type: dtypes.dtype | None = None,
) -> Tensor:
    """NumPy ``matmul`` semantics (batch broadcasting, 1-D operands). ``partials_type``
    None takes the Ir's session option ``partialsTypeMatMuls`` ("float" / "half"; unset:
    PopART's default, float), as PopXL's matmul does.

    Raises:
        ValueError: ``partials_type`` other than float32 / float16 (PopXL's check).
        TypeError: operands of different dtypes (a ``popart.popart_exception`` too, as
            PopART's op setup raises it).
    """
    check_in_current_graph("matmul", lhs=lhs, rhs=rhs)
    partials_type = partials_of(partials_type, "matmul", lhs, rhs)
    if isinstance(lhs, Tensor) and isinstance(rhs, Tensor):
        check_tensor_ipu_and_tile_set(lhs=lhs, rhs=rhs)
    attrs = {
        "available_memory_proportion": available_memory_proportion,
        "output_type": output_type,
        "partials_type": partials_type,
    }
    (out,) = create_op("MatMul", [lhs, rhs], attrs)
    return out


#: the partials types PopXL's matmul takes, by dtype and by PopART's option strings
_PARTIALS = {
    "float": dtypes.float32,
    "half": dtypes.float16,
    dtypes.float32: dtypes.float32,
    dtypes.float16: dtypes.float16,
}


def partials_of(partials_type: Any, what: str, lhs: Any, rhs: Any) -> dtypes.dtype | None:
    """A matmul's partials type as a dtype; None gives the current Ir's session option
    ``partialsTypeMatMuls`` where it is set, else None (PopART's default, float).

    Raises:
        ValueError: a type other than float / half (PopXL's words).
    """
    if partials_type is None:
        from tremula.popxl._ir.ir import session_options
        from tremula.popxl.context import get_current_graph

        partials_type = session_options(get_current_graph().ir).partialsTypeMatMuls or None
        if partials_type is None:
            return None
    key = partials_type.lower() if isinstance(partials_type, str) else partials_type
    found = _PARTIALS.get(key) if isinstance(key, (str, dtypes.dtype)) else None
    if found is None:
        raise ValueError(
            f"{what}: partials_type must be 'float' or 'half', got {partials_type!r} "
            f"({what} of {getattr(lhs, 'id', lhs)!r} and {getattr(rhs, 'id', rhs)!r})"
        )
    return found


def _target_shape(t: Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    check_tensor(t, "reshape")
    shape = tuple(int(s) for s in (shape if isinstance(shape, Sequence) else (shape,)))
    if any(s < -1 for s in shape):
        raise ValueError(
            f"Invalid shape value in reshape. Must be '>0' or '-1': {shape} (reshape of {t.id!r})"
        )
    if shape.count(-1) > 1:
        raise ValueError(
            f"Reshape shape can contain at most one '-1' value: {shape} (reshape of {t.id!r})"
        )
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        if known == 0 or t.nelms % known:
            raise OpSetupError(f"reshape: cannot reshape {t.shape} to {shape}")
        shape = tuple(t.nelms // known if s == -1 else s for s in shape)
    if int(np.prod(shape)) != t.nelms:
        raise OpSetupError(  # PopART's ReshapeOp::setup
            f"reshape: {t.id!r} of shape {t.shape} ({t.nelms} elements) cannot become {shape}"
        )
    return shape


def reshape(t: Tensor, shape: Sequence[int]) -> Tensor:
    """A copy of ``t`` with another shape of as many elements (one ``-1`` is inferred).

    Raises:
        ValueError: the shape holds another number of elements.
    """
    (out,) = create_op("Reshape", [t], {"shape": _target_shape(t, shape)})
    return out


def reshape_(t: Tensor, shape: Sequence[int]) -> Tensor:
    """A view of ``t`` with another shape: writes to it reach ``t``."""
    (out,) = create_op("ReshapeInplace", [t], {"shape": _target_shape(t, shape)})
    return out


def flatten(t: Tensor) -> Tensor:
    """A copy of ``t`` as one dimension of ``t.nelms`` elements."""
    return reshape(t, (check_tensor(t, "flatten").nelms,))


def flatten_(t: Tensor) -> Tensor:
    """A view of ``t`` as one dimension: writes to it reach ``t``."""
    return reshape_(t, (check_tensor(t, "flatten_").nelms,))


def _perm(t: Tensor, permutation: Sequence[int] | None) -> tuple[int, ...]:
    check_tensor(t, "transpose")
    perm = tuple(range(t.rank))[::-1] if permutation is None else tuple(permutation)
    if perm and max(perm) >= t.rank:
        raise ValueError(
            f"Values in permutation must be less than the tensor's rank {t.rank}. Found "
            f"{max(perm)} (transpose of {t.id!r} by {perm})"
        )
    if sorted(perm) != list(range(t.rank)):
        raise OpSetupError(  # PopART's TransposeOp::setup
            f"transpose: {perm} is not a permutation of the {t.rank} axes of {t.id!r}"
        )
    return perm


def transpose(t: Tensor, permutation: Sequence[int] | None = None) -> Tensor:
    """A copy of ``t`` with its axes permuted (reversed when ``permutation`` is None)."""
    (out,) = create_op("Transpose", [t], {"permutation": _perm(t, permutation)})
    return out


def transpose_(t: Tensor, permutation: Sequence[int] | None = None) -> Tensor:
    """A view of ``t`` with its axes permuted: writes to it reach ``t``."""
    (out,) = create_op("TransposeInplace", [t], {"permutation": _perm(t, permutation)})
    return out


def getitem(t: Tensor, key: Any) -> Tensor:
    """``t[key]`` as PopXL's ``Tensor.__getitem__`` builds it.

    Basic indexing (ints and slices, a tuple of them) is ``ops.slice`` (steps of 1 or -1),
    then ``ops.subsample`` for steps larger than 1, then ``ops.squeeze`` of the axes an
    int indexes; ``...`` and ``None`` (NumPy's, a Tremula extension) expand to whole axes
    and add axes of size 1 (a reshape). An integer tensor or host array gathers along axis
    0 (``ops.gather``); a boolean tensor or host array masks, ``ops.where(key, t, 0)``
    (masking, not NumPy's compaction).

    Raises:
        TypeError: another kind of index.
        IndexError: an int out of range for its axis.
    """
    if isinstance(key, (Tensor, list, np.ndarray)):
        from tremula.popxl.ops.gather import gather
        from tremula.popxl.ops.misc import where
        from tremula.popxl.tensor import constant

        if not isinstance(key, Tensor) and np.asarray(key).dtype == bool:
            key = constant(np.asarray(key), name="mask")
        if isinstance(key, Tensor) and key.dtype == dtypes.bool:
            return where(key, t, 0)
        return gather(t, key)
    return _basic_index(t, key if isinstance(key, tuple) else (key,))


def _basic_index(t: Tensor, key: tuple) -> Tensor:
    from tremula.popxl.ops.shape import slice as slice_op
    from tremula.popxl.ops.shape import squeeze, subsample

    for k in key:
        if isinstance(k, (Tensor, list, np.ndarray)):
            raise TypeError(
                f"Only integers, slices (`:`), integer tensors and boolean tensors are valid "
                f"indices: indexing {t.id!r} with {type(k).__name__} (use ops.gather)"
            )
        if not (k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice))):
            raise TypeError(
                f"Only integers, slices (`:`), integer tensors and boolean tensors are valid "
                f"indices: cannot index tensor {t.id!r} with {k!r}"
            )
    try:
        np.empty(t.shape, dtype=np.bool_)[key]  # NumPy's checks: range, too many indices
    except IndexError as err:
        raise IndexError(
            f"index {key!r} out of range for {t.id!r} of shape {t.shape}: {err}"
        ) from None
    # one entry per axis of t: ellipsis -> whole axes; None entries kept for the end
    n_axes = sum(1 for k in key if k is not None and k is not Ellipsis)
    full: list[Any] = []
    for k in key:
        if k is Ellipsis:
            full.extend([slice(None)] * (t.rank - n_axes))
        else:
            full.append(k)
    if Ellipsis not in key:
        full.extend([slice(None)] * (t.rank - n_axes))
    starts: list[int] = []
    stops: list[Any] = []  # None: down to the first element (a reversed axis)
    steps: list[int] = []
    axes: list[int] = []
    strides, squeezed = [1] * t.rank, []
    out_shape: list[int] = []  # the result's shape with the None axes
    axis = 0
    for k in full:
        if k is None:
            out_shape.append(1)
            continue
        size = t.shape[axis]
        if isinstance(k, slice):
            first, last, step = k.indices(size)
            n = len(range(first, last, step))
            strides[axis] = abs(step) if n else 1
            if not (n and step > 0 and (first, last) == (0, size)):  # not the whole axis
                # t[a:b:s] is t[a:b:±1] subsampled by |s|; empty: t[0:0]
                starts.append(first if n else 0)
                stops.append((None if last < 0 else last) if n else 0)
                steps.append(-1 if step < 0 and n else 1)
                axes.append(axis)
            out_shape.append(n)
        else:
            i = int(k) % size
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
            axes.append(axis)
            squeezed.append(axis)
        axis += 1
    out = slice_op(t, starts, stops, steps, axes) if axes else t
    if any(s > 1 for s in strides):
        out = subsample(out, list(strides))
    if squeezed:
        out = squeeze(out, squeezed)
    if len(out_shape) != out.rank:  # None added axes of size 1
        out = reshape(out, tuple(out_shape))
    return out


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of ``t``, named ``output_name`` where given (``ops.rename`` is the same op)."""
    (out,) = create_op("Identity", [t], {}, [output_name])
    return out


rename = identity


def detach(t: Tensor) -> Tensor:
    """A copy of ``t`` through which autodiff passes no gradient."""
    (out,) = create_op("Detach", [t])
    return out


def detach_(t: Tensor) -> Tensor:
    """:func:`detach` in place: the result aliases ``t`` (a ``DetachInplace`` op, as in
    PopXL); ``t`` itself is not written."""
    (out,) = create_op("DetachInplace", [t])
    return out


def cast(
    t: Tensor, data_type: dtypes.dtype | None = None, *, dtype: dtypes.dtype | None = None
) -> Tensor:
    """``t`` converted to ``data_type`` (NumPy's conversion; float8 needs the scaled casts).

    ``data_type`` is PopXL's parameter name; ``dtype=`` is accepted as well (Tremula's
    earlier name), exactly one of the two.

    Raises:
        TypeError: a float8 type at either end (use ``ops.pow2scale_cast_to_fp8`` /
            ``ops.pow2scale_cast_from_fp8``), or neither / both of ``data_type`` and
            ``dtype``.
    """
    if (data_type is None) == (dtype is None):
        raise TypeError("cast: give the target type once, as data_type (or dtype=)")
    dtype = dtypes.dtype.as_dtype(data_type if dtype is None else dtype)
    check_in_current_graph("cast", t=t)
    ends = (dtype, getattr(t, "dtype", dtype))
    if any(d.name.startswith("float8") for d in ends):  # as PopXL: scaled casts only
        raise TypeError(
            f"cast: {getattr(t, 'id', t)!r} ({ends[1]}) to {dtype}: float8 casts take a scale; use "
            f"ops.pow2scale_cast_to_fp8 / ops.pow2scale_cast_from_fp8"
        )
    (out,) = create_op("Cast", [t], {"dtype": dtype})
    return out


def init(
    shape: Sequence[int],
    dtype: dtypes.dtype,
    name: str | None = None,
    init_type: str = "zero",
    meta_shape: Sequence[int] | None = None,
) -> Tensor:
    """A new tensor filled with zeros (``init_type="zero"``) or left undefined ("undef")."""
    if init_type not in ("zero", "undef"):
        raise ValueError(f"init: init_type must be 'zero' or 'undef', got {init_type!r}")
    attrs = {
        "shape": tuple(int(s) for s in shape),
        "dtype": dtypes.dtype.as_dtype(dtype),
        "init_type": init_type,
        "meta_shape": tuple(meta_shape or ()),
    }
    (out,) = create_op("Init", [], attrs, [name])
    return out
