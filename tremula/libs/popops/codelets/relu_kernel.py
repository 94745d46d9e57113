"""A ReLU layer's two fused maps as compiled loops (the ``fast`` extra): the forward
``relu(x + b)`` (bias and activation) and the backward ``g * float(x > c)`` (the
activation's gradient), each one pass over memory with the bits of the NumPy path's two
calls.

The NumPy path of a fused map (``expr_eval.compile_steps``) makes one call per node into a
temporary: ``np.add`` then ``np.maximum(t, 0)``; ``np.greater`` writing 1.0 / 0.0, then
``np.multiply``. Each loop here makes the same float32 operations per element, in the same
order, without the temporary (numba neither contracts nor reorders them without
``fastmath``):

- ``relu(x + b)``: ``y = x + b``, then ``y`` where ``y > 0`` or ``y`` is NaN (NumPy's
  maximum keeps a NaN operand as it is), else ``+0.0`` (also for ``-0.0``). Where ``x``
  and ``b`` are both NaN, which payload NumPy's ``add`` keeps depends on the loop it picks
  (measured: the first operand's or the second's by row length, position in the row and
  broadcasting), which a loop cannot follow: the loop stops there and the run is left to
  the NumPy path, which then writes every element again (so the loop is taken only where
  the output shares no memory with an operand).
- ``g * float(x > c)`` (or ``float(x > c) * g``): the factor is never NaN, so a NaN
  product is ``g``'s (quieted) or the default NaN of ``inf * 0``, whatever the order.

On first use both loops are checked bit for bit against the NumPy path on a grid of
special values (NaNs of several payloads, signalling ones, infinities, signed zeros,
subnormals) and random numbers, at every start offset of a vector (:func:`_checked`);
where they differ, or without numba, the NumPy path runs. Taken for float32 operands that
are views the output's shape broadcasts over (3-d after merging axes without a copy), with
the innermost axis contiguous.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from tremula.libs import jit
from tremula.libs.popops.expr import BinaryOpType, UnaryOpType

F32 = np.dtype(np.float32)
#: the factors of :func:`_mask_mul`
FACTORS = np.array([1.0, 0.0], F32)
FACTORS.flags.writeable = False


def offered(t: Any) -> bool:
    """Whether the fused map ``t`` (an ``expr_eval.Typed``) is one of the two forms."""
    return _form(t) is not None


def compiled(
    t: Any, inputs: Sequence[Any], out: np.ndarray, numpy_run: Callable[[], None]
) -> Callable[[], None] | None:
    """The compiled run of the fused map ``t`` from ``inputs`` into ``out`` when it is one
    of the two forms of the module docstring on views it can take (``numpy_run``: the
    NumPy path, for a run the loop leaves to it), else None."""
    if not jit.available() or out.dtype != F32:
        return None
    form = _form(t)
    if form is None:
        return None
    kind, leaves = form
    shape = out.shape
    target = _rows(out, shape)
    if target is None:
        return None
    operands = []
    for leaf in leaves:
        arr = np.asarray(inputs[leaf.index] if leaf.index >= 0 else leaf.value)
        if arr.dtype != F32 or not _apart(arr, out, same_ok=kind == "mask_mul"):
            return None
        operands.append(arr)
    if not _checked():
        return None
    dims = np.array(_dims(shape), np.int64)
    if kind == "relu_add":
        x, b = (_rows(np.broadcast_to(a, shape), shape) for a in operands)
        if x is None or b is None:
            return None
        args = (*x, *b, *target, dims)

        def relu_add() -> None:
            if not _relu_add(*args):  # two NaNs met: NumPy's payload
                numpy_run()

        return relu_add
    x, g = (_rows(np.broadcast_to(a, shape), shape) for a in operands[::2])
    c = operands[1]
    if x is None or g is None or c.size != 1:
        return None
    mask_args = (*x, c.reshape(1), FACTORS, *g, *target, dims)

    def mask_mul() -> None:
        _mask_mul(*mask_args)

    return mask_mul


def _form(t: Any) -> tuple[str, list[Any]] | None:
    """("relu_add", [x, b]) for ``relu(x + b)``, ("mask_mul", [x, c, g]) for
    ``g * float(x > c)`` in either order, on float32 operands that are placeholders or
    constants; else None."""
    if t.op is None or t.in_type is None or t.in_type.numpy != F32:
        return None
    if t.op.op == UnaryOpType.RELU:
        inner = t.args[0]
        if inner.op is None or inner.op.op != BinaryOpType.ADD or inner.in_type != t.in_type:
            return None
        return ("relu_add", list(inner.args)) if all(map(_leaf, inner.args)) else None
    if t.op.op != BinaryOpType.MULTIPLY:
        return None
    for mask, g in (t.args, t.args[::-1]):
        compare = mask.args[0] if mask.op is None and len(mask.args) == 1 else None
        if compare is None or mask.dtype.numpy != F32 or not _leaf(g):
            continue
        if compare.op is None or compare.op.op != BinaryOpType.GREATER_THAN:
            continue
        if compare.in_type is None or compare.in_type.numpy != F32:
            continue
        if all(map(_leaf, compare.args)):
            return "mask_mul", [*compare.args, g]
    return None


def _leaf(node: Any) -> bool:
    return node.index >= 0 or (node.op is None and not node.args)


def _dims(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``shape`` as three axes: leading ones merged, missing ones of length 1."""
    if len(shape) >= 3:
        return int(np.prod(shape[:-2])), shape[-2], shape[-1]
    return (1,) * (3 - len(shape)) + tuple(shape)  # type: ignore[return-value]


def _rows(view: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, int, int] | None:
    """A view of ``shape`` as (a flat float32 array from its first element to its last,
    the element steps of its two outer axes of :func:`_dims`): the loop reads element
    ``[i, j, k]`` at ``i * s0 + j * s1 + k``. None where the innermost axis is not
    contiguous, a step is negative or the leading axes do not merge."""
    if not shape or 0 in shape:
        return None
    try:
        three = np.reshape(view, _dims(shape), copy=False)
    except (TypeError, ValueError):  # (NumPy before 2.1 has no copy=False)
        return None
    s0, s1, s2 = three.strides
    item = F32.itemsize
    if (s2 != item and three.shape[2] > 1) or s0 < 0 or s1 < 0 or s0 % item or s1 % item:
        return None
    n0, n1, n2 = three.shape
    span = (n0 - 1) * (s0 // item) + (n1 - 1) * (s1 // item) + n2
    flat = np.lib.stride_tricks.as_strided(three, shape=(span,), strides=(item,))
    return flat, s0 // item, s1 // item


def _apart(arr: np.ndarray, out: np.ndarray, same_ok: bool) -> bool:
    """Whether the loop may read ``arr`` element by element while writing ``out``: no
    shared memory, or (``same_ok``) the very same view (each element read before it is
    written)."""
    if not np.may_share_memory(arr, out):
        return True
    if not np.shares_memory(arr, out):  # (interleaved rows, say: solved exactly, once)
        return True
    same = arr.__array_interface__["data"][0] == out.__array_interface__["data"][0]
    return same_ok and same and arr.shape == out.shape and arr.strides == out.strides


@jit.kernel
def _relu_add(x, x0, x1, b, b0, b1, out, o0, o1, dims):  # type: ignore[no-untyped-def]
    """``out = relu(x + b)`` element by element (see the module docstring; operands as
    :func:`_rows` gives them, ``dims`` the three axes); False where it stopped after a row
    with two NaN addends (``out`` partly written)."""
    zero = np.float32(0.0)
    n = dims[2]
    for i in range(dims[0]):
        for j in range(dims[1]):
            xa, ba, oa = i * x0 + j * x1, i * b0 + j * b1, i * o0 + j * o1
            xr, br, orow = x[xa : xa + n], b[ba : ba + n], out[oa : oa + n]  # (rows: the
            pairs = 0  # (counted, not a break: the loop stays vectorised)
            for k in range(n):  # compiler vectorises a loop over slices it can index)
                p = xr[k]
                q = br[k]
                pairs += (p != p) & (q != q)
                y = p + q
                orow[k] = y if (y > zero or y != y) else zero
            if pairs:
                return False
    return True


@jit.kernel
def _mask_mul(x, x0, x1, c, factors, g, g0, g1, out, o0, o1, dims):  # type: ignore[no-untyped-def]
    """``out = g * (1.0 if x > c[0] else 0.0)`` element by element; the factors 1.0 and
    0.0 are ``factors``' (:data:`FACTORS`), read at run time, so that the compiler cannot
    turn ``g * 1.0`` into ``g`` (which would leave a signalling NaN unquieted)."""
    limit, one, zero = c[0], factors[0], factors[1]
    n = dims[2]
    for i in range(dims[0]):
        for j in range(dims[1]):
            xa, ga, oa = i * x0 + j * x1, i * g0 + j * g1, i * o0 + j * o1
            xr, gr, orow = x[xa : xa + n], g[ga : ga + n], out[oa : oa + n]
            for k in range(n):
                m = one if xr[k] > limit else zero
                orow[k] = gr[k] * m


@cache
def _checked() -> bool:
    """Whether both loops give the NumPy path's bits on every pair of special values (and
    random numbers) at every start offset up to a vector of 16 (special values in the
    vector loop and in the scalar loop around it, which the compiler may make differently),
    each special value also as the mask's threshold; and whether the sum stops at two NaN
    addends."""
    bits = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
    bits += [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0xBF800000]
    special = np.array(bits, np.uint32).view(F32)
    rng = np.random.default_rng(0)
    a = np.concatenate([np.repeat(special, special.size), rng.standard_normal(1000).astype(F32)])
    b = np.concatenate([np.tile(special, special.size), rng.standard_normal(1000).astype(F32)])
    with np.errstate(all="ignore"):
        mask = np.greater(a, special[:, None]).astype(F32)
        want_masks = (np.multiply(b, mask), np.multiply(mask, b))
        want_relu = np.maximum(np.add(a, b), np.float32(0))
    for m in range(special.size):  # each special value as the threshold
        for start in range(17):
            got, _ = _run(_mask_mul, a, start, special[m : m + 1], b)
            if not all(_same(got, want[m, start:]) for want in want_masks):
                return False  # (the product's order does not matter: the factor is never NaN)
    both_nan = np.isnan(a) & np.isnan(b)
    one = ~both_nan
    for start in range(17):  # pairs of NaNs stop the loop: the others, one at a time
        _, done = _run(_relu_add, a, start, b)
        if done:
            return False
        got, done = _run(_relu_add, a[one], start, b[one])
        if not done or not _same(got, want_relu[one][start:]):
            return False
    return True


def _run(kernel: Any, a: np.ndarray, start: int, *more: np.ndarray) -> tuple[np.ndarray, bool]:
    """``kernel`` over the 1-d operands from ``start`` on as one row: its output and what
    it returned (``more``: the threshold and the gradient of :func:`_mask_mul`, the bias
    of :func:`_relu_add`)."""
    n = a.size - start
    got = np.empty(n, F32)
    dims = np.array([1, 1, n], np.int64)
    if kernel is _mask_mul:
        c, g = more
        kernel(a[start:], 0, 0, c, FACTORS, g[start:], 0, 0, got, 0, 0, dims)
        return got, True
    done = kernel(a[start:], 0, 0, more[0][start:], 0, 0, got, 0, 0, dims)
    return got, bool(done)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
