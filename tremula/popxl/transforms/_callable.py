"""Modules named like the function they define (``autodiff.autodiff``, ...) are made
callable as that function.

``popxl.transforms.autodiff`` is the function, as in PopXL; but importing the module under
its ``popxl.`` alias name (``from popxl.transforms.autodiff import ExpectedConnection``)
makes Python rebind the package attribute to the module. A callable module keeps
``popxl.transforms.autodiff(graph)`` working either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def callable_module(module_name: str, fn: Callable[..., Any]) -> None:
    """Calling module ``module_name`` calls ``fn``."""

    class _CallableModule(ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    sys.modules[module_name].__class__ = _CallableModule
