"""``TensorSpec``: what a tensor is, without the tensor (its public home is
:mod:`tremula.popxl.tensor`, as in PopXL)."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from typing import Any

from tremula.popxl import dtypes


def _dims(shape: Any, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of Python ints. Each dimension must be an integer (an ``int`` or
    a NumPy integer): PopXL hands shapes to ``TensorInfo``, whose binding refuses a float or
    a string with a ``TypeError`` rather than truncating it.

    Raises:
        TypeError: ``shape`` is not iterable, or a dimension is not an integer.
    """
    try:
        return tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(
            f"A tensor's {what} must be a sequence of integers, got {shape!r}"
        ) from None


class TensorSpec(Mapping):
    """Shape, dtype and meta shape of a tensor; a Mapping so that ``**spec`` works."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: dtypes.dtype,
        meta_shape: tuple[int, ...] | None = (),
    ) -> None:
        self.shape = _dims(shape, "shape")
        self.dtype = dtypes.dtype.as_dtype(dtype)
        self.meta_shape = _dims(meta_shape or (), "meta_shape")  # None: no meta shape

    def _dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and self._dict() == other._dict()

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.name, self.meta_shape))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, meta_shape={self.meta_shape})"
