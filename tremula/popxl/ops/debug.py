"""Printing and placement: ``print_tensor``, ``ipu_copy`` and ``io_tile_copy``. Each returns
a copy of its input (numerically an identity)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from tremula.errors import ProgramError
from tremula.poplar.program import PrintTensorFmt
from tremula.popxl.context import get_current_context
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor


def _identity(specs: Any, a: dict[str, Any]) -> list[Any]:
    return [specs[0]]


def _copy(x: Any, a: dict[str, Any]) -> list[np.ndarray]:
    return [np.array(x[0])]


defop("PrintTensor", _identity, _copy)
defop("IpuCopy", _identity, _copy)
defop("IoTileCopy", _identity, _copy)


def print_format(
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 75,
    digits: int = 8,
    float_format: str = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
) -> dict[str, Any]:
    """A ``PrintTensor`` op's ``format`` attribute (Poplar's ``PrintTensorFmt`` fields;
    the defaults are PopXL's ``print_tensor``'s)."""
    return {
        "summarise_threshold": int(summarise_threshold),
        "edge_items": int(edge_items),
        "max_line_width": int(max_line_width),
        "digits": int(digits),
        "float_format": float_format,
        "separator": str(separator),
        "open_bracket": str(open_bracket),
        "close_bracket": str(close_bracket),
    }


def print_tensor(
    t: Tensor,
    title: str | None = None,
    print_self: bool = True,
    print_gradient: bool = False,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 75,
    digits: int = 8,
    float_format: str = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
) -> Tensor:
    """Print ``t``'s value when the program runs, titled ``title`` (default
    ``print_<name>``), and return a copy of it. With ``print_gradient`` the gradient op
    (autodiff) prints the gradient titled ``<title>_gradient``. The format arguments
    lay the value out as Poplar's ``PrintTensorFmt`` says (NumPy's print options: more than
    ``summarise_threshold`` elements summarised to ``edge_items`` a side, ``digits`` digits,
    ``float_format`` "auto" / "fixed" / "scientific" / "none", elements joined by
    ``separator``, lists in ``open_bracket`` ``close_bracket``).

    Raises:
        ValueError: an unknown ``float_format``, or a bracket that is not one character.
    """
    check_tensor(t, "print_tensor")
    fmt = print_format(
        summarise_threshold,
        edge_items,
        max_line_width,
        digits,
        float_format,
        separator,
        open_bracket,
        close_bracket,
    )
    try:
        PrintTensorFmt(**fmt)
    except ProgramError as err:
        raise ValueError(f"print_tensor({t.id!r}): {err}") from None
    attrs = {
        "title": f"print_{t.name}" if title is None else str(title),
        "print_self": bool(print_self),
        "print_gradient": bool(print_gradient),
        "format": fmt,
    }
    (out,) = create_op("PrintTensor", [t], attrs)
    return out


@contextmanager
def _placed(ipu: int | None = None, tile_set: str | None = None) -> Iterator[None]:
    """Create ops (and their outputs) on ``ipu`` / ``tile_set``."""
    ctx = get_current_context()
    if ipu is not None:
        ctx.ipus.append(int(ipu))
    if tile_set is not None:
        ctx.tile_sets.append(tile_set)
    try:
        yield
    finally:
        if ipu is not None:
            ctx.ipus.pop()
        if tile_set is not None:
            ctx.tile_sets.pop()


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """A copy of ``t`` on virtual IPU ``destination`` (``t.copy_to_ipu``).

    Raises:
        ValueError: a negative destination; ``source`` not given and ``t`` has no IPU
            (create it inside ``popxl.ipu(n)``).
    """
    check_tensor(t, "ipu_copy")
    if int(destination) != destination or destination < 0:
        raise ValueError(
            f"ipu_copy: destination must be a non-negative integer, got {destination!r}"
        )
    if source is None:
        try:
            source = t.ipu
        except ValueError as err:
            raise ValueError(
                f"Could not infer the ipu for Tensor {t.id!r} in ipu_copy ({err}); pass source="
            ) from None
    with _placed(ipu=int(destination)):
        (out,) = create_op("IpuCopy", [t], {"source": int(source), "destination": int(destination)})
    return out


def io_tile_copy(t: Tensor) -> Tensor:
    """A copy of ``t`` on the other tile set: compute tiles to IO tiles or back."""
    check_tensor(t, "io_tile_copy")
    dest = "compute" if t._tile_set == "io" else "io"
    with _placed(tile_set=dest):
        (out,) = create_op("IoTileCopy", [t], {"tile_set": dest})
    return out


__all__ = ["io_tile_copy", "ipu_copy", "print_tensor"]
