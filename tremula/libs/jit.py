"""Optional compiled kernels (the ``fast`` extra: ``pip install 'tremula[fast]'``, numba).

A few vertices spend their host time in loops that NumPy can only express with extra passes
over memory (a gather, then a widening cast, then the arithmetic). For those, a library
writes the loop once as plain Python over NumPy arrays and wraps it with :func:`kernel`;
when numba is installed the wrapper compiles it (once per process, cached on disk) and the
vertex calls the compiled loop; otherwise, or after ``set_enabled(False)``, the vertex runs
its NumPy path, which stays the reference and computes the same numbers (to float
rounding where a compiled loop sums in another order than BLAS).

Kernels are compiled lazily on their first call, so importing Tremula never waits for
numba. A kernel writing output it does not read again may store it with :func:`stream4`
(a streaming store when compiled) and end with :func:`stream_fence`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
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


def deferred(
    first: Callable[[], None], make: Callable[[], Callable[[], None] | None]
) -> Callable[[], None]:
    """A prepared run that makes ``first()`` (its NumPy path) on its first call and, from
    its second call on, the run ``make()`` gives then (a compiled one, which must compute
    the same numbers), or ``first`` where that is None. A program run once pays neither
    the compile nor numba's imports; later runs take the compiled loop."""
    state: list[Any] = []

    def run() -> None:
        if len(state) == 2:
            state[1]()
        elif not state:
            state.append(True)
            first()
        else:
            state.append(make() or first)
            state[1]()

    return run


def stream4(arr: Any, i: int, v0: Any, v1: Any, v2: Any, v3: Any) -> None:
    """``arr[i : i + 4] = v0, v1, v2, v3`` for a kernel's output that is written once and
    not read again soon (a float32 array; ``arr[i]`` 16-byte aligned). Compiled, one
    streaming (non-temporal) store: the line is not read into the cache before it is
    written, which saves a read of memory per line written; end the kernel with
    :func:`stream_fence`. In Python (the kernel's ``py``), four plain stores."""
    arr[i] = v0
    arr[i + 1] = v1
    arr[i + 2] = v2
    arr[i + 3] = v3


def stream_fence() -> None:
    """Order a kernel's :func:`stream4` stores before the memory accesses after it (a
    store fence when compiled; nothing in Python)."""


def _numba() -> ModuleType:
    """numba, imported on a kernel's first call (with :func:`stream4` and
    :func:`stream_fence` registered for compiled kernels)."""
    if not _installed:  # pragma: no cover - guarded by available()
        raise RuntimeError("compiled kernels need numba (pip install 'tremula[fast]')")
    if "numba" not in sys.modules:
        # numba's compiler colours its error messages through colorama, whose set-up writes
        # a terminal reset ("\x1b[0m") to the process's stdout at exit when that is a
        # terminal: a library's kernels must not add to its host program's output (a
        # PopRun instance's stdout is a pseudo-terminal). Set unless the user chose.
        os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    numba = importlib.import_module("numba")
    global _registered
    if not _registered:
        _register_streaming()
        _registered = True
    return numba


_registered = False


def _register_streaming() -> None:
    """The compiled forms of :func:`stream4` (one ``<4 x float>`` store marked
    ``!nontemporal``) and :func:`stream_fence` (an LLVM fence)."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _store4(typingctx: Any, arr: Any, i: Any, v0: Any, v1: Any, v2: Any, v3: Any) -> Any:
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array = context.make_array(signature.args[0])(context, builder, args[0])
            at = builder.gep(array.data, [args[1]])
            vector_type = ir.VectorType(ir.FloatType(), 4)
            vector = ir.Constant(vector_type, ir.Undefined)
            for lane, value in enumerate(args[2:]):
                value = context.cast(builder, value, signature.args[2 + lane], types.float32)
                vector = builder.insert_element(vector, value, ir.Constant(ir.IntType(32), lane))
            store = builder.store(vector, builder.bitcast(at, vector_type.as_pointer()), 16)
            flag = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
            store.set_metadata("nontemporal", flag)
            return context.get_dummy_value()

        return types.void(arr, i, v0, v1, v2, v3), codegen

    @intrinsic
    def _fence(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            builder.fence("seq_cst")
            return context.get_dummy_value()

        return types.void(), codegen

    # numba matches an overload's parameters to the function's by name and annotation:
    # these stay unannotated, as the Python functions' types do not apply to them
    @overload(stream4)
    def _stream4(arr, i, v0, v1, v2, v3):  # type: ignore[no-untyped-def]
        return lambda arr, i, v0, v1, v2, v3: _store4(arr, i, v0, v1, v2, v3)

    @overload(stream_fence)
    def _stream_fence():  # type: ignore[no-untyped-def]
        return lambda: _fence()
