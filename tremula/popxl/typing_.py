"""PopXL's ``popxl.typing_``: how annotation aliases such as ``TensorByRef`` are made."""

from __future__ import annotations

from typing import Annotated, Any


def NewAliasAnnotation(name: str, tp: Any) -> Any:
    """An annotation that means ``tp`` to type checkers and carries ``name`` at run time:
    ``Annotated[tp, name]``. ``Ir.create_graph`` reads the name (``"TensorByRef"`` marks a
    by-reference graph input).

    Args:
        name: The marker, a string.
        tp: The annotated type.

    Returns:
        ``typing.Annotated[tp, name]``.
    """
    return Annotated[tp, name]


__all__ = ["NewAliasAnnotation"]
