"""Shape, indexing, type and reduction ONNX ops. Host values (shapes, initialisers used as
indices) are folded with NumPy; device values go through PopXL ops. Where an ONNX opset moved
an attribute to an input (Slice 10, Squeeze / Unsqueeze / Split / ReduceSum 13, other
reductions 18, Clip 11, Pad 11), both forms are read."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tremula import popxl
from tremula.popart.types import BY_ONNX, popxl_dtype
from tremula.popxl import ops


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _reshape_to(node: Any, shape: tuple[int, ...]) -> Any:
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return v.reshape(shape)
    return v if tuple(v.shape) == tuple(shape) else ops.reshape(v, shape)


def _reshape(node: Any) -> list[Any]:
    src = node.shape(0)
    spec = node.ints(1, "shape")
    allow_zero = int(node.attr("allowzero", 0))
    shape = [src[i] if d == 0 and not allow_zero else d for i, d in enumerate(spec)]
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = math.prod(src) // max(known, 1)
    if math.prod(shape) != math.prod(src):
        raise node.error(f"cannot reshape {list(src)} to {spec}")
    return [_reshape_to(node, tuple(shape))]


def _flatten(node: Any) -> list[Any]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 1)), len(shape))
    return [_reshape_to(node, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


def _axes_of(node: Any, input_index: int, attr_until: int) -> list[int] | None:
    """Axes from the attribute (opsets < ``attr_until``) or from input ``input_index``."""
    if node.version < attr_until:
        axes = node.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    return node.ints(input_index, "axes") if node.has(input_index) else None


def _squeeze(node: Any) -> list[Any]:
    shape = node.shape(0)
    axes = _axes_of(node, 1, 13)
    axes = [i for i, d in enumerate(shape) if d == 1] if axes is None else axes
    drop = {_axis(a, len(shape)) for a in axes}
    return [_reshape_to(node, tuple(d for i, d in enumerate(shape) if i not in drop))]


def _unsqueeze(node: Any) -> list[Any]:
    shape = list(node.shape(0))
    axes = _axes_of(node, 1, 13) or []
    rank = len(shape) + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return [_reshape_to(node, tuple(shape))]


def _transpose(node: Any) -> list[Any]:
    rank = len(node.shape(0))
    perm = node.attr("perm") or list(range(rank))[::-1]
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.transpose(v, perm)]
    return [ops.transpose(v, [int(p) for p in perm])]


def _concat(node: Any) -> list[Any]:
    axis = int(node.attr("axis"))
    if all(node.is_const(i) for i in range(node.n_inputs)):
        return [np.concatenate([node.const(i) for i in range(node.n_inputs)], axis=axis)]
    ts = [t for t in node.tensors() if math.prod(t.shape) > 0 or len(node.tensors()) == 1]
    return [ops.concat(ts, _axis(axis, len(ts[0].shape)))]


def _gather(node: Any) -> list[Any]:
    axis = _axis(int(node.attr("axis", 0)), len(node.shape(0)))
    if node.is_const(0) and node.is_const(1):
        return [np.take(node.const(0), node.const(1), axis=axis)]
    indices = node.value(1)
    if isinstance(indices, np.ndarray):
        dim = node.shape(0)[axis]
        indices = np.where(indices < 0, indices + dim, indices)
    return [ops.gather(node.tensor(0), indices, axis=axis)]


def _gather_elements(node: Any) -> list[Any]:
    """ONNX GatherElements: ``out[p] = data[p with p[axis] = indices[p]]``, as one gather
    from the flattened data at flat positions (the other coordinates are known on the
    host; the indices may be computed by the model)."""
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape))
    ishape = node.shape(1)
    if len(ishape) != len(shape) or any(
        i > d for a, (i, d) in enumerate(zip(ishape, shape)) if a != axis
    ):
        raise node.error(f"indices of shape {list(ishape)} do not fit data {list(shape)}")
    strides = np.cumprod((1, *shape[:0:-1]))[::-1]
    grid = np.indices(ishape, dtype=np.int64)
    base = sum(grid[a] * int(strides[a]) for a in range(len(shape)) if a != axis)
    indices = node.value(1)
    if isinstance(indices, np.ndarray):
        idx = np.where(indices < 0, indices + shape[axis], indices).astype(np.int64)
        if node.is_const(0):
            return [np.take_along_axis(node.const(0), idx, axis=axis)]
        flat = (base + idx * int(strides[axis])).astype(np.int32)
        return [ops.gather(ops.reshape(node.tensor(0), (-1,)), flat)]
    idx = ops.cast(indices, popxl.int32)  # type: ignore[assignment]
    idx = ops.where(ops.less(idx, 0), ops.add(idx, shape[axis]), idx)  # type: ignore[arg-type, assignment]
    flat = ops.add(ops.mul(idx, int(strides[axis])), base.astype(np.int32))  # type: ignore[arg-type]
    return [ops.gather(ops.reshape(node.tensor(0), (-1,)), flat)]


def _scatter_elements(node: Any) -> list[Any]:
    """ONNX ScatterElements (and the older Scatter): PopXL's ``scatter``."""
    if str(node.attr("reduction", "none")) != "none":
        raise node.error(f"reduction={node.attr('reduction')!r} is not supported")
    axis = int(node.attr("axis", 0))
    return [ops.scatter(node.tensor(0), node.tensor(1), node.tensor(2), axis=axis)]


def _slice(node: Any) -> list[Any]:
    shape = node.shape(0)
    if node.version < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes") or list(range(len(starts))), [1] * len(starts)
    else:
        starts, ends = node.ints(1, "starts"), node.ints(2, "ends")
        axes = node.ints(3, "axes") if node.has(3) else list(range(len(starts)))
        steps = node.ints(4, "steps") if node.has(4) else [1] * len(starts)
    index = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(int(a), len(shape))
        index[a] = slice(*slice(int(s), int(e), int(st)).indices(shape[a]))
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [v[tuple(index)]]
    keep = [(i, sl) for i, sl in enumerate(index) if sl != slice(None)]
    if not keep:
        return [v]
    ax, sls = [k[0] for k in keep], [k[1] for k in keep]
    unit = [1 if sl.step > 0 else -1 for sl in sls]
    stops = [sl.stop if sl.stop >= 0 else None for sl in sls]  # numpy's -1 stop: past index 0
    v = ops.slice(v, [s.start for s in sls], stops, unit, ax)  # type: ignore[arg-type]
    strides = [1] * len(shape)
    for a, sl in zip(ax, sls):
        strides[a] = abs(sl.step)
    return [ops.subsample(v, strides) if any(s > 1 for s in strides) else v]


def _split(node: Any) -> list[Any]:
    shape = node.shape(0)
    axis = _axis(int(node.attr("axis", 0)), len(shape))
    if node.version < 13:
        sizes = node.attr("split")
    else:
        sizes = node.ints(1, "split") if node.has(1) else None
    n = node.n_outputs
    if not sizes:
        each = -(-shape[axis] // n)
        sizes = [min(each, shape[axis] - i * each) for i in range(n)]
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return list(np.split(v, np.cumsum(sizes)[:-1], axis=axis))
    return list(ops.split(v, [int(s) for s in sizes], axis))


def _expand(node: Any) -> list[Any]:
    shape = tuple(np.broadcast_shapes(node.shape(0), tuple(node.ints(1, "shape"))))
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.broadcast_to(v, shape).copy()]
    if tuple(v.shape) == shape:
        return [v]
    zeros = node.cx.constant(f"{node.proto.output[0]}/zeros", np.zeros(shape, v.dtype.as_numpy()))
    return [ops.add(v, zeros)]


def _tile(node: Any) -> list[Any]:
    reps = node.ints(1, "repeats")
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.tile(v, reps)]
    for axis, r in enumerate(reps):
        if r != 1:
            v = ops.concat([v] * r, axis)
    return [v]


def _cast(node: Any) -> list[Any]:
    to = BY_ONNX[int(node.attr("to"))].numpy
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [v.astype(to)]
    target = popxl_dtype(to if to.itemsize < 8 else np.dtype(to.kind + "4"))  # type: ignore[arg-type, union-attr]
    return [v if v.dtype == target else ops.cast(v, target)]


def _constant(node: Any) -> list[Any]:
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if node.has_attr(name):
            value = node.attr(name)
            dtype = np.float32 if "float" in name else (np.int64 if "int" in name else None)
            return [np.asarray(value, dtype=dtype)]
    raise node.error("a Constant needs a value attribute")


def _constant_of_shape(node: Any) -> list[Any]:
    fill = node.attr("value")
    fill = np.zeros(1, np.float32) if fill is None else np.asarray(fill).reshape(-1)
    return [np.full(tuple(node.ints(0, "shape")), fill[0], dtype=fill.dtype)]


def _range(node: Any) -> list[Any]:
    start, limit, delta = (node.const(i) for i in range(3))
    return [np.arange(start, limit, delta, dtype=np.asarray(start).dtype)]


def _nonzero(node: Any) -> list[Any]:
    """The positions of the non-zero elements, ``[rank, count]`` (a scalar as one element,
    as onnxruntime), folded on the host: the count depends on the values, and a program's
    shapes are fixed when it is compiled."""
    v = node.value(0)
    if not isinstance(v, np.ndarray):
        raise node.error(
            f"input {node.proto.input[0]!r} is computed on the device, and the shape of "
            f"NonZero's output (one column per non-zero element) depends on its values; "
            f"Tremula's programs have shapes fixed when they are compiled, so NonZero runs "
            f"only on values known when the session is made (initialisers, constants, "
            f"shapes)"
        )
    return [np.array(np.nonzero(np.atleast_1d(v)), dtype=np.int64)]


def _clip(node: Any) -> list[Any]:
    if node.version < 11:
        lo, hi = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        lo = float(node.const(1)) if node.has(1) else -np.inf
        hi = float(node.const(2)) if node.has(2) else np.inf
    if node.is_const(0):
        return [np.clip(node.const(0), lo, hi)]
    return [ops.clip(node.tensor(0), float(lo), float(hi))]


def _pads(node: Any, rank: int) -> list[int]:
    """Pad's ``[begin..., end...]`` for every axis: an attribute before opset 11, then an
    input, for the axes of the ``axes`` input only from opset 18."""
    if node.version < 11:
        return [int(p) for p in node.attr("pads")]
    pads = node.ints(1, "pads")
    if not node.has(3):
        return pads
    axes = [_axis(a, rank) for a in node.ints(3, "axes")]
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return full


def _pad(node: Any) -> list[Any]:
    if node.version < 11:
        value = float(node.attr("value", 0.0))
    else:
        value = float(node.const(2).reshape(-1)[0]) if node.has(2) else 0.0
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise node.error(f"Pad mode {mode!r} is not supported (constant, edge, reflect)")
    v = node.value(0)
    rank = len(node.shape(0))
    pads = _pads(node, rank)
    if any(p < 0 for p in pads):
        raise node.error("negative pads are not supported")
    if isinstance(v, np.ndarray):
        widths = list(zip(pads[:rank], pads[rank:]))
        if mode == "constant":
            return [np.pad(v, widths, constant_values=value)]
        return [np.pad(v, widths, mode=mode)]
    for axis in range(rank):
        before, after = int(pads[axis]), int(pads[rank + axis])
        if before or after:
            v = _pad_axis(node, v, axis, before, after, value, mode)
    return [v]


def _pad_axis(
    node: Any, v: Any, axis: int, before: int, after: int, value: float, mode: str
) -> Any:
    """``v`` padded on ``axis``: with ``value`` (constant), copies of the edge element
    (edge), or the elements mirrored about the edge element (reflect)."""
    n = v.shape[axis]
    if mode == "reflect" and max(before, after) >= n:
        raise node.error(f"reflect pads of {before} and {after} need more than {n} elements")
    parts = []  # type: ignore[var-annotated]
    for count, where in ((before, "before"), (after, "after")):
        if not count:
            parts.append(None)
        elif mode == "constant":
            shape = list(v.shape)
            shape[axis] = count
            fill = np.full(shape, value, v.dtype.as_numpy())
            parts.append(node.cx.constant(f"{node.proto.output[0]}/{axis}/{where}", fill))
        elif mode == "edge":
            edge = ops.slice(
                v, [0 if where == "before" else n - 1], [1 if where == "before" else n], [1], [axis]
            )
            parts.append(ops.concat([edge] * count, axis) if count > 1 else edge)
        elif where == "before":  # elements count .. 1, in that order
            parts.append(ops.slice(v, [count], [0], [-1], [axis]))
        else:  # elements n-2 .. n-1-count
            stop = n - 2 - count if n - 2 - count >= 0 else None
            parts.append(ops.slice(v, [n - 2], [stop], [-1], [axis]))  # type: ignore[list-item]
    pieces = [p for p in (parts[0], v, parts[1]) if p is not None]
    return ops.concat(pieces, axis) if len(pieces) > 1 else v


def _flip(t: Any, axis: int) -> Any:
    """``t`` reversed along ``axis``."""
    return ops.slice(t, [t.shape[axis] - 1], [None], [-1], [axis])  # type: ignore[list-item]


def _arg(fn: Callable[..., Any]) -> Callable[[Any], list]:
    def rule(node: Any) -> list[Any]:
        rank = len(node.shape(0))
        axis = _axis(int(node.attr("axis", 0)), rank)
        keep = bool(node.attr("keepdims", 1))
        if not int(node.attr("select_last_index", 0)):
            return [fn(node.tensor(0), axis, keep)]
        # the last of ties: the first in the reversed tensor, counted from the end
        x = node.tensor(0)
        return [ops.sub(x.shape[axis] - 1, fn(_flip(x, axis), axis, keep))]

    return rule


def _topk(node: Any) -> list[Any]:
    k = int(node.attr("k")) if node.version < 10 else node.ints(1, "k")[0]
    axis = int(node.attr("axis", -1))
    largest, sort = bool(node.attr("largest", 1)), bool(node.attr("sorted", 1))
    return list(ops.topk(node.tensor(0), k, axis, largest, sort))


def _onehot(node: Any) -> list[Any]:
    """ONNX OneHot: the depth, a host value (refused if computed on the device), is the
    op's input 1, as in PopART's OnehotOp."""
    node.ints(1, "depth")
    axis = int(node.attr("axis", -1))
    return [ops.onehot(node.tensor(0), node.tensor(1), node.tensor(2), axis)]


def _cumsum(node: Any) -> list[Any]:
    """ONNX CumSum: ``reverse`` sums from the end (the sum of the reversed tensor,
    reversed back); ``exclusive`` leaves each element out (the sum of the tensor shifted
    by one, a zero first)."""
    axis = _axis(node.ints(1, "axis")[0], len(node.shape(0)))
    x = node.tensor(0)
    reverse, exclusive = int(node.attr("reverse", 0)), int(node.attr("exclusive", 0))
    if reverse:
        x = _flip(x, axis)
    if exclusive:
        shape = list(x.shape)
        shape[axis] = 1
        zero = node.cx.constant(f"{node.proto.output[0]}/zero", np.zeros(shape, x.dtype.as_numpy()))
        n = x.shape[axis]
        x = ops.concat([zero, ops.slice(x, [0], [n - 1], [1], [axis])], axis) if n > 1 else zero
    y = ops.cumsum(x, axis)
    return [_flip(y, axis) if reverse else y]


_REDUCE = {  # ONNX op -> (PopXL op, NumPy fold, opset from which axes are an input)
    "ReduceSum": (ops.sum, np.sum, 13),
    "ReduceMean": (ops.mean, np.mean, 18),
    "ReduceMax": (ops.max, np.max, 18),
    "ReduceMin": (ops.min, np.min, 18),
    "ReduceProd": (ops.prod, np.prod, 18),
    "ReduceL1": (ops.l1, None, 18),
    "ReduceL2": (ops.l2, None, 18),
    "ReduceSumSquare": (ops.sumsquare, None, 18),
    "ReduceLogSum": (ops.logsum, None, 18),
    "ReduceLogSumExp": (ops.logsumexp, None, 18),
}


def _reduce(op_type: str) -> Callable[[Any], list]:
    device, host, since = _REDUCE[op_type]

    def rule(node: Any) -> list[Any]:
        rank = len(node.shape(0))
        axes = _axes_of(node, 1, since)
        keep = bool(node.attr("keepdims", 1))
        if axes is None or (not axes and not int(node.attr("noop_with_empty_axes", 0))):
            axes = list(range(rank))
        elif not axes:
            return [node.value(0)]
        axes = [_axis(a, rank) for a in axes]
        if host is not None and node.is_const(0):
            return [np.asarray(host(node.const(0), axis=tuple(axes), keepdims=keep))]  # type: ignore[operator]
        return [device(node.tensor(0), axes, keep)]

    return rule


SHAPE: dict[str, Callable[[Any], list]] = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Concat": _concat,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "Slice": _slice,
    "Split": _split,
    "Expand": _expand,
    "Tile": _tile,
    "Cast": _cast,
    "Shape": lambda node: [  # opset 15's start and end slice the shape, as in Python
        np.asarray(
            node.shape(0)[slice(node.attr("start", 0), node.attr("end", None))], dtype=np.int64
        )
    ],
    "Size": lambda node: [np.asarray(math.prod(node.shape(0)), dtype=np.int64)],
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "NonZero": _nonzero,
    "Clip": _clip,
    "Pad": _pad,
    "ArgMax": _arg(ops.argmax),
    "ArgMin": _arg(ops.argmin),
    "TopK": _topk,
    "OneHot": _onehot,
    "CumSum": _cumsum,
    **{name: _reduce(name) for name in _REDUCE},
}
