"""One binding view per popxl object (``ir._pb_ir``, ``graph._pb_graph``,
``tensor._pb_tensor``, ``session._pb_session``), kept on the object itself: the view then
lives and dies with its object. (A module-level weak-keyed table would hold each view,
which holds its object, so no Ir, graph or tensor ever viewed would be freed.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

V = TypeVar("V")

_ATTR = "_pb_view"


def view_of(obj: Any, make: Callable[[Any], V]) -> V:
    """The view of ``obj``, made by ``make(obj)`` the first time it is asked for."""
    found = vars(obj).get(_ATTR)
    if found is None:
        found = make(obj)
        vars(obj).setdefault(_ATTR, found)
    return vars(obj)[_ATTR]  # type: ignore[no-any-return]


def register(obj: Any, view: Any) -> None:
    """Make ``view`` the view of ``obj`` (a view made by its constructor: ``_ir.Ir()``)."""
    vars(obj).setdefault(_ATTR, view)
