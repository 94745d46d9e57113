"""Tensors: views over variables.

A graph stores the elements of all its variables of one element type in one address space
(see :class:`~tremula.poplar.graph.Space`). A :class:`Tensor` is an array of element
addresses in that space, shaped like the tensor: a fresh variable's addresses are an
``arange``, and every view (slice, reshape, transpose, broadcast, reverse, subsample ...) is the
same NumPy operation applied to the address array. NumPy views of an ``arange`` cost no
memory, a concatenation materialises addresses, and a write through any view reaches the
variable because it writes the addresses the view names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import TensorError
from tremula.poplar.types import Type

if TYPE_CHECKING:
    from tremula.poplar.graph import GraphState

Shape = tuple[int, ...]


def _bounds(value: int | Sequence[int]) -> list[int]:
    """The per-dimension bounds of a slice whose other bound is a sequence."""
    if isinstance(value, int | np.integer):
        raise TypeError(f"slice: bounds are both integers or both sequences, got {value!r}")
    return list(value)


def _norm_dim(dim: int, rank: int, what: str) -> int:
    if not -rank <= dim < max(rank, 1):
        raise TensorError(f"{what}: dimension {dim} out of range for a rank-{rank} tensor")
    return dim % max(rank, 1)


class Tensor:
    """A view of elements of one graph's variables, with a shape and an element type.

    Tensors are immutable values; view methods return new tensors over the same elements.
    """

    __slots__ = ("_addr", "dtype", "graph")

    def __init__(self, graph: GraphState, dtype: Type, addresses: np.ndarray) -> None:
        self.graph = graph
        self.dtype = dtype
        self._addr = addresses

    # ---- basic properties ----
    @property
    def shape(self) -> Shape:
        return tuple(self._addr.shape)

    @property
    def rank(self) -> int:
        return self._addr.ndim

    @property
    def num_elements(self) -> int:
        return int(self._addr.size)

    numel = num_elements

    @property
    def element_type(self) -> Type:
        return self.dtype

    @property
    def addresses(self) -> np.ndarray:
        """Element addresses in the graph's space for ``dtype``, shaped like the tensor."""
        return self._addr

    def shape_str(self) -> str:
        return "[" + ",".join(str(d) for d in self.shape) + "]"

    def __repr__(self) -> str:
        names = self.graph.variable_names_of(self)
        return f"Tensor<{self.dtype} {self.shape_str()} of {names}>"

    def __len__(self) -> int:
        if self.rank == 0:
            raise TensorError("len() of a scalar tensor")
        return self.shape[0]

    def __iter__(self):
        """The sub-tensors along the first dimension."""
        for i in range(len(self)):
            yield self[i]

    def _view(self, addr: np.ndarray) -> Tensor:
        return Tensor(self.graph, self.dtype, addr)

    # ---- indexing and slicing ----
    def __getitem__(self, key: Any) -> Tensor:
        """NumPy basic indexing (ints, slices, ``...``, ``None``) and integer-array indexing."""
        try:
            return self._view(self._addr[key])
        except (IndexError, TypeError) as err:
            raise TensorError(
                f"cannot index tensor of shape {self.shape} with {key!r}: {err}"
            ) from None

    def slice(
        self, begin: int | Sequence[int], end: int | Sequence[int], dim: int | None = None
    ) -> Tensor:
        """Poplar's ``slice``: ``[begin, end)`` along ``dim`` (default 0), or per dimension
        when ``begin`` and ``end`` are sequences."""
        if isinstance(begin, int | np.integer) and isinstance(end, int | np.integer):
            d = _norm_dim(0 if dim is None else dim, self.rank, "slice")
            if not 0 <= begin <= end <= self.shape[d]:
                raise TensorError(
                    f"slice [{begin}, {end}) out of range for dimension {d} of size {self.shape[d]}"
                )
            key = [slice(None)] * self.rank
            key[d] = slice(int(begin), int(end))
            return self._view(self._addr[tuple(key)])
        begins, ends = _bounds(begin), _bounds(end)
        if len(begins) != self.rank or len(ends) != self.rank:
            raise TensorError(f"slice bounds {begins}, {ends} must have {self.rank} entries")
        out = self
        for d, (b, e) in enumerate(zip(begins, ends)):
            out = out.slice(b, e, d)
        return out

    def slices(self, intervals: Sequence[tuple[int, int]], dim: int = 0) -> list[Tensor]:
        return [self.slice(b, e, dim) for b, e in intervals]

    def index(self, indices: Sequence[int]) -> Tensor:
        """Index successive leading dimensions by the given integers."""
        return self[tuple(int(i) for i in indices)]

    # ---- shape changes ----
    def reshape(self, shape: Sequence[int]) -> Tensor:
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.num_elements:
            raise TensorError(
                f"cannot reshape tensor of shape {self.shape} "
                f"({self.num_elements} elements) to {shape}"
            )
        return self._view(self._addr.reshape(shape))

    def flatten(self, start: int | None = None, end: int | None = None) -> Tensor:
        """All dimensions into one, or dimensions ``[start, end)`` into one."""
        if start is None:
            return self._view(self._addr.reshape(-1))
        end = self.rank if end is None else end
        if not 0 <= start < end <= self.rank:
            raise TensorError(f"flatten [{start}, {end}) invalid for rank {self.rank}")
        s = self.shape
        return self.reshape((*s[:start], int(np.prod(s[start:end])), *s[end:]))

    def dim_shuffle(self, permutation: Sequence[int]) -> Tensor:
        perm = tuple(int(p) for p in permutation)
        if sorted(perm) != list(range(self.rank)):
            raise TensorError(f"dim_shuffle: {perm} is not a permutation of 0..{self.rank - 1}")
        return self._view(self._addr.transpose(perm))

    def transpose(self) -> Tensor:
        """Swap the two dimensions of a matrix."""
        if self.rank != 2:
            raise TensorError(f"transpose needs a rank-2 tensor, got shape {self.shape}")
        return self._view(self._addr.T)

    def dim_roll(self, dim: int, new_pos: int = 0) -> Tensor:
        dim = _norm_dim(dim, self.rank, "dim_roll")
        new_pos = _norm_dim(new_pos, self.rank, "dim_roll (new position)")
        return self._view(np.moveaxis(self._addr, dim, new_pos))

    def expand(self, dims: Sequence[int]) -> Tensor:
        """Insert singleton dimensions *before* the given dimensions of this tensor
        (Poplar's ``expand``); an index equal to the rank appends at the end, and a
        repeated index inserts several singletons at that place."""
        positions = sorted(int(x) for x in dims)
        for d in positions:
            if not 0 <= d <= self.rank:
                raise TensorError(f"expand: index {d} out of range for rank {self.rank}")
        axes = [d + k for k, d in enumerate(positions)]
        return self._view(np.expand_dims(self._addr, axes) if axes else self._addr)

    def squeeze(self, dims: Sequence[int] | None = None) -> Tensor:
        if dims is None:
            return self._view(np.squeeze(self._addr))
        dims = tuple(_norm_dim(d, self.rank, "squeeze") for d in dims)
        if len(set(dims)) != len(dims):
            raise TensorError(f"squeeze: repeated dimension in {dims}")
        for d in dims:
            if self.shape[d] != 1:
                raise TensorError(f"squeeze: dimension {d} has size {self.shape[d]}, not 1")
        return self._view(np.squeeze(self._addr, axis=dims))

    def broadcast(self, n: int, dim: int) -> Tensor:
        """Repeat the tensor ``n`` times along ``dim`` (Poplar's ``broadcast``)."""
        dim = _norm_dim(dim, self.rank, "broadcast")
        if n < 1:
            raise TensorError(f"broadcast: count {n} must be >= 1")
        if self.shape[dim] == 1:
            shape = list(self.shape)
            shape[dim] = n
            return self._view(np.broadcast_to(self._addr, shape))
        reps = [1] * self.rank
        reps[dim] = n
        return self._view(np.tile(self._addr, reps))

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        """NumPy broadcasting to ``shape`` (a read-only view)."""
        try:
            return self._view(np.broadcast_to(self._addr, tuple(shape)))
        except ValueError:
            raise TensorError(f"cannot broadcast shape {self.shape} to {tuple(shape)}") from None

    def reverse(self, dim: int) -> Tensor:
        dim = _norm_dim(dim, self.rank, "reverse")
        return self._view(np.flip(self._addr, axis=dim))

    def subsample(self, stride: int, dim: int) -> Tensor:
        dim = _norm_dim(dim, self.rank, "subsample")
        if stride < 1:
            raise TensorError(f"subsample: stride {stride} must be >= 1")
        key = [slice(None)] * self.rank
        key[dim] = slice(None, None, stride)
        return self._view(self._addr[tuple(key)])

    def upsample(self, scale: int, dim: int) -> Tensor:
        dim = _norm_dim(dim, self.rank, "upsample")
        if scale < 1:
            raise TensorError(f"upsample: scale {scale} must be >= 1")
        return self._view(np.repeat(self._addr, scale, axis=dim))

    # ---- queries ----
    def is_contiguous(self) -> bool:
        """True when the elements are consecutive addresses in row-major order."""
        flat = self._addr.reshape(-1)
        if flat.size <= 1:
            return True
        return bool(flat[-1] - flat[0] == flat.size - 1 and np.all(np.diff(flat) == 1))

    def intersects_with(self, other: Tensor) -> bool:
        if other.graph is not self.graph or other.dtype is not self.dtype:
            return False
        return bool(np.intersect1d(self._addr, other._addr).size)

    def contains_aliases(self) -> bool:
        flat = self._addr.reshape(-1)
        return bool(np.unique(flat).size != flat.size)

    def same_as(self, other: Tensor) -> bool:
        return (
            other.graph is self.graph
            and other.dtype is self.dtype
            and other.shape == self.shape
            and bool(np.all(other._addr == self._addr))
        )

    T = property(lambda self: self.transpose())


def affine_layout(
    addresses: np.ndarray, roots: dict[int, int]
) -> tuple[int, tuple[int, ...]] | None:
    """``(first address, element strides)`` when ``addresses`` is a NumPy view of one
    variable's address ``arange`` (so address ``[i, j, ...] = first + i*s0 + j*s1 + ...``),
    else None (the addresses were copied: a concatenation or an integer-array index)."""
    root = addresses
    while isinstance(root.base, np.ndarray):
        root = root.base
    start = roots.get(id(root))
    if start is None:
        return None
    size = root.itemsize
    offset = addresses.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return start + offset // size, tuple(s // size for s in addresses.strides)


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate tensors of one graph and element type along ``dim``."""
    tensors = list(tensors)
    if not tensors:
        raise TensorError("concat of an empty list of tensors")
    first = tensors[0]
    for i, t in enumerate(tensors[1:], start=1):
        if t.graph is not first.graph:
            raise TensorError(f"concat: tensor {i} belongs to another graph")
        if t.dtype is not first.dtype:
            raise TensorError(f"concat: tensor {i} has type {t.dtype}, tensor 0 has {first.dtype}")
    dim = _norm_dim(dim, first.rank, "concat")
    try:
        addr = np.concatenate([t._addr for t in tensors], axis=dim)
    except ValueError as err:
        shapes = [t.shape for t in tensors]
        raise TensorError(f"concat along {dim}: incompatible shapes {shapes}: {err}") from None
    return Tensor(first.graph, first.dtype, addr)
