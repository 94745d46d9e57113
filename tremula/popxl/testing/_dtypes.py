"""The dtypes a parametrised test runs over."""

from __future__ import annotations

from tremula.popxl import dtypes


def get_all_dtypes() -> list[dtypes.dtype]:
    """Every PopXL dtype, each once (aliases such as ``half`` are not repeated)."""
    return list(dtypes.dtype._by_name.values())


def get_all_int_dtypes(
    include_signed: bool = True, include_unsigned: bool = True
) -> list[dtypes.dtype]:
    """The integer dtypes, signed and/or unsigned.

    Args:
        include_signed: Include int8 ... int64.
        include_unsigned: Include uint8 ... uint64.
    """
    return [
        d
        for d in get_all_dtypes()
        if d.is_int and (include_signed if d.is_signed else include_unsigned)
    ]
