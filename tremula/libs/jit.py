"""Optional compiled kernels (the ``fast`` extra: ``pip install 'tremula[fast]'``, numba).

A few vertices spend their host time in loops that NumPy can only express with extra passes
over memory (a gather, then a widening cast, then the arithmetic). For those, a library
writes the loop once as plain Python over NumPy arrays and wraps it with :func:`kernel`;
when numba is installed the wrapper compiles it (once per process, cached on disk) and the
vertex calls the compiled loop; otherwise, or after ``set_enabled(False)``, the vertex runs
its NumPy path, which stays the reference and computes the same numbers (to float
rounding where a compiled loop sums in another order than BLAS).

Kernels are compiled lazily on their first call, so importing Tremula never waits for
numba.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: whether the optional accelerator is installed; it is imported only when a kernel first
#: compiles (importing numba takes a second and pulls in SciPy)
_installed = importlib.util.find_spec("numba") is not None
_enabled = _installed


def available() -> bool:
    """Whether compiled kernels run: numba is installed and they are not disabled."""
    return _enabled


def set_enabled(enabled: bool) -> bool:
    """Turn compiled kernels on (only possible with numba installed) or off; returns the
    previous setting. With them off every vertex runs its NumPy path."""
    global _enabled
    previous = _enabled
    _enabled = bool(enabled) and _installed
    return previous


class Kernel:
    """A loop compiled by numba on first use (``nopython`` mode, cached on disk).

    Call it only when :func:`available` says so; the Python function it wraps is kept as
    ``py`` (slow, but it documents what the compiled loop does and tests may run it on small
    inputs).
    """

    def __init__(self, fn: Callable[..., Any], **options: Any) -> None:
        self.py = fn
        self.options = options  # more ``numba.njit`` options (``error_model``)
        self._compiled: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self._compiled is not None:
            return self._compiled(*args)
        numba = _numba()
        compiled = numba.njit(cache=True, nogil=True, **self.options)(self.py)
        with warnings.catch_warnings():
            # the first call compiles (or loads the disk cache); a read-only install cannot
            # cache and says so: it then compiles again in each process
            warnings.simplefilter("ignore", numba.NumbaWarning)
            result = compiled(*args)
        self._compiled = compiled
        return result


def kernel(fn: Callable[..., Any] | None = None, *, error_model: str = "python") -> Any:
    """Decorator: ``fn`` (loops over NumPy arrays and scalars, nothing else) as a
    :class:`Kernel`; ``@kernel(error_model="numpy")`` lets float divisions by zero give
    inf / nan as NumPy's do (numba's default, ``"python"``, checks every division to raise
    ZeroDivisionError, which also keeps loops with a division from being vectorised)."""
    if fn is None:
        return lambda f: Kernel(f, error_model=error_model)
    return Kernel(fn, error_model=error_model)


def _numba() -> ModuleType:
    """numba, imported on a kernel's first call."""
    if not _installed:  # pragma: no cover - guarded by available()
        raise RuntimeError("compiled kernels need numba (pip install 'tremula[fast]')")
    return importlib.import_module("numba")
