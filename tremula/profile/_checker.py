"""A problem collector with the typed field, index and per-tile array checks of the validator.

Every problem is one line ``<field path>: <what is wrong>``, naming the expected and the actual
value. Paths are built only when a problem is reported, so that checking ten thousand steps
stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

#: A dimension an array must have: (expected length or None for any, what the length is).
Dim = tuple[int | None, str]

#: Comparison operators: name -> (elementwise test, symbol printed when the test fails).
_COMPARISONS: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "==": (np.equal, "!="),
    ">=": (np.greater_equal, "<"),
    "<=": (np.less_equal, ">"),
}


def is_int(value: Any) -> TypeGuard[int | np.integer]:
    """True for Python or NumPy integers, but not for booleans."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def is_number(value: Any) -> bool:
    """True for finite ints and floats (not booleans)."""
    if is_int(value):
        return True
    return isinstance(value, float | np.floating) and math.isfinite(value)


def show(value: Any) -> str:
    """A short rendering of a value for a problem message, with its type when not obvious."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def index_text(index: Sequence[int]) -> str:
    """``(1, 3)`` -> ``'[1][3]'``."""
    return "".join(f"[{int(i)}]" for i in index)


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (is_int, "an int"),
    "number": (is_number, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, Mapping), "an object"),
    "list": (lambda v: isinstance(v, list | tuple | np.ndarray), "a list"),
}


class Checker:
    """Collects problems. The checking methods return the value checked, or None if it is bad
    (the problem is then recorded), so that callers check further only what is usable."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        """Record the problem ``message`` at field ``path``."""
        self.problems.append(f"{path}: {message}")

    def kind(self, value: Any, path: str, kind: str) -> Any:
        """Return ``value`` if it is of ``kind`` (see ``_KINDS``), else record and return None."""
        test, name = _KINDS[kind]
        if test(value):
            return value
        self.add(path, f"expected {name}, got {show(value)}")
        return None

    def field(
        self, obj: Mapping[str, Any], key: str, path: str, kind: str, optional: bool = False
    ) -> Any:
        """Return ``obj[key]`` if present and of ``kind``; else record a problem, return None.

        Args:
            obj: The object holding the field.
            key: The field name.
            path: The path of ``obj``; the field's path is ``path.key``.
            kind: One of ``int``, ``number``, ``str``, ``dict``, ``list``.
            optional: If true a missing field is not a problem.
        """
        if key not in obj:
            if not optional:
                self.add(f"{path}.{key}", "missing")
            return None
        value = obj[key]
        if _KINDS[kind][0](value):  # the common case: no path string to build
            return value
        return self.kind(value, f"{path}.{key}", kind)

    def count(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        minimum: int = 0,
        optional: bool = False,
    ) -> int | None:
        """Return the int field ``obj[key]`` if present and ``>= minimum``, else None."""
        value = self.field(obj, key, path, "int", optional)
        if value is None:
            return None
        if value < minimum:
            self.add(f"{path}.{key}", f"{value} < {minimum}")
            return None
        return int(value)

    def fraction(self, obj: Mapping[str, Any], key: str, path: str) -> float | None:
        """Return the number field ``obj[key]`` if it is in [0, 1], else record and None."""
        value = self.field(obj, key, path, "number")
        if value is None:
            return None
        if not 0.0 <= value <= 1.0:
            self.add(f"{path}.{key}", f"{value} is not in [0, 1]")
            return None
        return float(value)

    def choice(self, obj: Mapping[str, Any], key: str, path: str, allowed: Sequence[str]) -> Any:
        """Return the string field ``obj[key]`` if it is one of ``allowed``, else None."""
        value = self.field(obj, key, path, "str")
        if value is None:
            return None
        if value not in allowed:
            self.add(f"{path}.{key}", f"{value!r} is not one of {', '.join(allowed)}")
            return None
        return value

    def index(self, value: Any, path: str, size: int | None, table: str) -> int | None:
        """Check that ``value`` indexes a table of ``size`` entries (None: size unknown)."""
        if self.kind(value, path, "int") is None:
            return None
        if value < 0 or (size is not None and value >= size):
            entries = "unknown" if size is None else str(size)
            self.add(path, f"{value} is not a valid index into {table} ({entries} entries)")
            return None
        return int(value)

    def indices(self, arr: np.ndarray, path: str, size: int | None, table: str) -> bool:
        """Check that every element of an int array (already checked >= 0) indexes ``table``."""
        if size is None or arr.size == 0:
            return True
        bad = arr >= size
        if not bad.any():
            return True
        first, tail = _first_failure(bad)
        message = f"{arr[first]} is not a valid index into {table} ({size} entries){tail}"
        self.add(f"{path}{index_text(first)}", message)
        return False

    def equal(self, path: str, actual: Any, expected: Any, expected_text: str) -> bool:
        """Check a scalar equality; the message reads ``actual != expected_text = expected``."""
        if actual == expected:
            return True
        self.add(path, f"{actual} != {expected_text} = {expected}")
        return False

    def array(
        self, value: Any, path: str, dims: Sequence[Dim], minimum: int | None = 0
    ) -> np.ndarray | None:
        """Check a rectangular list of ints with the given dimensions; return it as int64.

        Args:
            value: The (nested) list.
            path: Its field path.
            dims: One ``(length, description)`` per dimension; a None length accepts any.
            minimum: Smallest allowed element, or None for no bound.

        Returns:
            The array, or None (with problems recorded) if it has the wrong shape or elements.
        """
        if not self._shape_ok(value, path, dims):
            return None
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError, OverflowError):  # ragged deeper than the dims
            arr = None
        if arr is not None and arr.size == 0:
            return np.zeros(_empty_shape(value, dims), dtype=np.int64)
        if arr is None or arr.dtype.kind not in "iu" or arr.ndim != len(dims):
            idx, bad = _first_non_int(value, len(dims))
            self.add(f"{path}{index_text(idx)}", f"expected an int, got {show(bad)}")
            return None
        if minimum is not None:
            self.elementwise(path, arr, ">=", np.asarray(minimum), str(minimum), rhs_is_value=True)
        return arr.astype(np.int64, copy=False)

    def elementwise(
        self,
        path: str,
        lhs: np.ndarray,
        op: str,
        rhs: np.ndarray,
        rhs_text: str,
        rhs_is_value: bool = False,
    ) -> bool:
        """Check ``lhs op rhs`` elementwise; report the first failing element and the count.

        The message reads ``path[i]: lhs[i] != rhs_text = rhs[i]`` (``!=`` becomes ``<`` or
        ``>`` for the orderings), or ``path[i]: lhs[i] < rhs_text`` when ``rhs_is_value``.
        """
        test, symbol = _COMPARISONS[op]
        bad = ~test(lhs, rhs)
        if not bad.any():
            return True
        first, tail = _first_failure(bad)
        where = "" if rhs_is_value else f" = {np.broadcast_to(rhs, lhs.shape)[first]}"
        self.add(f"{path}{index_text(first)}", f"{lhs[first]} {symbol} {rhs_text}{where}{tail}")
        return False

    def _shape_ok(self, value: Any, path: str, dims: Sequence[Dim]) -> bool:
        """Check list-ness and lengths level by level (the outer level, then each row)."""
        if self.kind(value, path, "list") is None:
            return False
        length, what = dims[0]
        if length is not None and len(value) != length:
            self.add(path, f"{len(value)} entries != {what} = {length}")
            return False
        if len(dims) == 1:
            return True
        row_length, row_what = dims[1]
        for i, row in enumerate(value):
            if self.kind(row, f"{path}[{i}]", "list") is None:
                return False
            expected = row_length if row_length is not None else len(value[0])
            if len(row) != expected:
                what = row_what if row_length is not None else f"len({path}[0])"
                self.add(f"{path}[{i}]", f"{len(row)} entries != {what} = {expected}")
                return False
        return True


def _first_failure(bad: np.ndarray) -> tuple[tuple[int, ...], str]:
    """The index of the first True of ``bad``, and `` (and N more)`` for the others."""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    more = int(bad.sum()) - 1
    return first, f" (and {more} more)" if more else ""


def _empty_shape(value: Any, dims: Sequence[Dim]) -> tuple[int, ...]:
    """The shape of an empty (nested) list: its outer length, then the expected row length."""
    if len(dims) == 1:
        return (len(value),)
    row_length = dims[1][0] if dims[1][0] is not None else 0
    return (len(value), len(value[0]) if len(value) else row_length)


def _walk(value: Any, ndim: int, prefix: tuple[int, ...] = ()) -> Iterator[tuple[tuple, Any]]:
    """Yield (index, element) over a nested list of depth ``ndim``."""
    for i, item in enumerate(value):
        if ndim == 1 or not isinstance(item, list | tuple | np.ndarray):
            yield (*prefix, i), item
        else:
            yield from _walk(item, ndim - 1, (*prefix, i))


def _first_non_int(value: Any, ndim: int) -> tuple[tuple, Any]:
    """The index and value of the first element of a nested list that is not an int."""
    for idx, item in _walk(value, ndim):
        if not is_int(item) or not -(2**63) <= item < 2**63:
            return idx, item
    return (), value
