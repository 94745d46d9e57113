"""Optional compiled kernels (the ``fast`` extra: ``pip install 'tremula[fast]'``, numba).

A few vertices spend their host time in loops that NumPy can only express with extra passes
over memory (a gather, then a widening cast, then the arithmetic). For those, a library
writes the loop once as plain Python over NumPy arrays and wraps it with :func:`kernel`;
when numba is installed the wrapper compiles it (once per process, cached on disk) and the
vertex calls the compiled loop; otherwise, or after ``set_enabled(False)``, the vertex runs
its NumPy path, which stays the reference and computes the same numbers.

Kernels are compiled lazily on their first call, so importing Tremula never waits for
numba.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

try:  # the optional accelerator
    import numba as _numba
except ImportError:  # pragma: no cover - the extra is absent
    _numba = None

_enabled = _numba is not None


def available() -> bool:
    """Whether compiled kernels run: numba is installed and they are not disabled."""
    return _enabled


def set_enabled(enabled: bool) -> bool:
    """Turn compiled kernels on (only possible with numba installed) or off; returns the
    previous setting. With them off every vertex runs its NumPy path."""
    global _enabled
    previous = _enabled
    _enabled = bool(enabled) and _numba is not None
    return previous


class Kernel:
    """A loop compiled by numba on first use (``nopython`` mode, cached on disk).

    Call it only when :func:`available` says so; the Python function it wraps is kept as
    ``py`` (slow, but it documents what the compiled loop does and tests may run it on small
    inputs).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.py = fn
        self._compiled: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self._compiled is not None:
            return self._compiled(*args)
        compiled = _compile(self.py)
        with warnings.catch_warnings():
            # the first call compiles (or loads the disk cache); a read-only install cannot
            # cache and says so: it then compiles again in each process
            warnings.simplefilter("ignore", _numba.NumbaWarning)
            result = compiled(*args)
        self._compiled = compiled
        return result


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: ``fn`` (loops over NumPy arrays and scalars, nothing else) as a
    :class:`Kernel`."""
    return Kernel(fn)


def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    if _numba is None:  # pragma: no cover - guarded by available()
        raise RuntimeError(f"kernel {fn.__name__}: numba is not installed")
    return _numba.njit(cache=True, nogil=True)(fn)
