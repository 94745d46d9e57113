"""The Engine: compile a graph and its programs, load them on a device, run them, and report.

Compilation (in the constructor) verifies the graph, compiles the programs into a step plan,
lays out memory and checks that it fits; everything the run needs is precomputed then. ``run``
replays it.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TextIO, TypeVar

import numpy as np

from tremula import profile as profile_format
from tremula import progress as progress_bars
from tremula.engine import nodes as N
from tremula.engine.compiler import StepPlan
from tremula.engine.fits import check_fits
from tremula.engine.liveness import Linearizer, intervals
from tremula.engine.memory import MemoryModel
from tremula.engine.options import parse_options
from tremula.engine.plan import Gather
from tremula.engine.profiles import Profiles
from tremula.engine.replay import TimelineReplay
from tremula.engine.report import instances
from tremula.engine.run import Runtime
from tremula.engine.streams import StreamConnection
from tremula.engine.timeline import NullTimeline, Timeline
from tremula.errors import EngineError, StreamError
from tremula.popdist.replicas import runtime_replicas
from tremula.poplar.device import Device
from tremula.poplar.graph import Graph
from tremula.poplar.program import Program
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import exact_cast

#: The stages of compilation a progress bar shows.
COMPILE_STAGES: tuple[str, ...] = ("verifying", "step plan", "liveness", "memory layout")


def _stages(progress: Any) -> Callable[[str | None], None]:
    """A function that ends the current stage on ``progress`` and names the next one."""
    started = [False]

    def stage(name: str | None) -> None:
        if progress is None:
            return
        if started[0]:
            progress.update(1)
        started[0] = True
        if name is not None:
            progress.set_description(f"compiling: {name}")

    return stage


def _has_loop(root: N.Node) -> bool:
    """Whether a program runs a ``Repeat`` of more than one iteration (a bar could show)."""
    return any(isinstance(n, N.RepeatNode) and n.count > 1 for n in N.reachable(root))


def _loop_bar(total: int, name: str) -> Any:
    """The bar of an on-device loop of ``total`` iterations (``Runtime.loop_progress``)."""
    desc = f"running: {name}" if name else "running"
    return progress_bars.bar(total, desc, "iteration", enabled=True)


_F = TypeVar("_F", bound=Callable[..., Any])


def locked(method: _F) -> _F:
    """Make ``method`` run holding its object's ``lock`` (:attr:`Engine.lock`; a PopXL
    ``Session`` uses its engine's)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


def _flush_at_end(profiles: Profiles) -> None:
    """The engine's finalizer: autoReport's last write, reported (not raised) on failure."""
    try:
        profiles.flush()
    except Exception as exc:  # at exit or collection there is no caller to raise to
        print(f"Tremula: autoReport could not write the execution profile: {exc}", file=sys.stderr)


class Engine:
    """Poplar's ``Engine(graph, programs, options)``.

    Args:
        graph: the graph (its top-level view).
        programs: one program, or a list of programs run by index with ``run(i)``.
        options: Poplar engine options (``autoReport.all``, ``autoReport.directory``,
            ``debug.allowOutOfMemory``, ``debug.executionProfile`` ...), overridden by the
            ``POPLAR_ENGINE_OPTIONS`` environment variable as in Poplar.
            ``target.firstRuntimeReplica`` / ``target.numberRuntimeReplica`` run only a
            block of the replicas here, one instance's part of a PopRun job (the other
            blocks run in the other instances, over MPI); host data and streams then
            cover this instance's replicas only (rows ``0..count-1``).
        progress: A progress bar (``tremula.progress.bar``) to advance by one per stage of
            compilation (:data:`COMPILE_STAGES`), or None.
        run_progress: Show a bar advancing per iteration of a program's outermost on-device
            loops (``Repeat``) while ``run`` runs it: None (the default, see
            ``tremula.progress``) on a terminal when ``tqdm`` is installed, True or False.
            The attribute of that name may be changed later.

    Threads: every method that loads, runs, connects or moves data holds :attr:`lock` (a
    re-entrant lock, one per engine), so calls from several threads never interleave. A
    sequence of calls that must not be split (``connect_stream`` then ``run``) holds it
    too: ``with engine.lock: ...``. Host callbacks run with the lock held.

    Raises:
        VerifyError: the graph is ill-formed.
        OutOfMemoryError: a tile does not fit (unless ``debug.allowOutOfMemory``).
    """

    def __init__(
        self,
        graph: Graph,
        programs: Program | Sequence[Program],
        options: dict[str, Any] | None = None,
        *,
        progress: Any = None,
        run_progress: bool | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.run_progress = run_progress
        if not isinstance(graph, Graph):
            raise EngineError(f"Engine: expected a poplar.Graph, got {type(graph).__name__}")
        progs = [programs] if isinstance(programs, Program) else list(programs)
        for i, p in enumerate(progs):
            if not isinstance(p, Program):
                raise EngineError(f"Engine: program {i} is a {type(p).__name__}, not a Program")
        self.options = parse_options(options)
        self.graph = graph
        self.state = graph.state
        self.target = self.state.target
        self.replication_factor = self.state.replication_factor
        o = self.options
        #: the replicas this process runs (all of them, or an instance's block)
        self.runtime_replicas = runtime_replicas(
            self.replication_factor, o.first_runtime_replica, o.number_runtime_replica
        )
        self.replicas = self.runtime_replicas.count
        stage = _stages(progress)
        stage(COMPILE_STAGES[0])
        graph.verify()
        stage(COMPILE_STAGES[1])
        sp = StepPlan(self.state)
        self.roots = [sp.compile_control(p) for p in progs]
        stage(COMPILE_STAGES[2])
        walk = Linearizer(self.state, sp.function_roots, sp.function_index).run(self.roots)
        stage(COMPILE_STAGES[3])
        self.memory = MemoryModel(sp, walk, intervals(self.state, walk)).build()
        stage(None)
        self.step_plan = sp
        self._tree = walk.tree
        self._loops = [_has_loop(root) for root in self.roots]
        if not self.options.allow_out_of_memory:
            check_fits(self.memory, self.target)
        self.mode = "CPU" if self.target.is_cpu else self.options.profiler_mode
        self._runtime: Runtime | None = None
        rr = self.runtime_replicas
        sections = (lambda: {"instances": instances(sp, rr)}) if rr.distributed else None
        self._profiles = Profiles(
            sp, self.memory, self._tree, self.mode, self.options, len(progs), sections
        )
        if self.options.auto_report:
            self._profiles.write_compiled()
            weakref.finalize(self, _flush_at_end, self._profiles)

    # ---- loading ----
    @locked
    def load(self, device: Device) -> None:
        """Load the compiled programs on ``device`` and initialise constants and initial
        values; variables start at zero."""
        if not isinstance(device, Device):
            raise EngineError(f"load: expected a poplar Device, got {type(device).__name__}")
        dt, gt = device.target, self.target
        for name in ("tiles_per_ipu", "memory_bytes_per_tile", "ipu_version", "target_type"):
            if getattr(dt, name) != getattr(gt, name):
                raise EngineError(
                    f"load: device {name} is {getattr(dt, name)!r} but the graph "
                    f"was compiled for {getattr(gt, name)!r}"
                )
        if dt.num_ipus < gt.num_ipus and not gt.is_cpu:
            raise EngineError(
                f"load: the device has {dt.num_ipus} IPU(s); the graph needs "
                f"{gt.num_ipus} per replica"
            )
        tl: Timeline = (
            NullTimeline(gt) if self.mode == "CPU" else Timeline(gt, record=self.mode != "NONE")
        )
        rt = Runtime(
            self.step_plan,
            self.runtime_replicas,
            tl,
            record_cs=self.mode in ("COMPUTE_SETS", "SINGLE_TILE_COMPUTE_SETS"),
        )
        for var in self.state.variables:
            if var.is_constant:
                rt.storage[var.dtype][:, var.start : var.start + var.size] = var.constant
        for t, data in self.state.initial_values:
            Gather.of(t.dtype, t.addresses).write(rt.storage, slice(None), data.reshape(1, -1))
        self._runtime = rt
        self._replay = TimelineReplay(self.roots)
        self._profiles.loaded(rt)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise EngineError(
                "the engine is not loaded: call engine.load(device) before "
                "running programs or moving data"
            )
        return self._runtime

    # ---- running ----
    @locked
    def run(self, index: int = 0, name: str = "") -> None:
        """Run program ``index``."""
        rt = self.runtime
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise EngineError(
                f"run: the program index must be an int, got {type(index).__name__} {index!r}"
            )
        if not 0 <= index < len(self.roots):
            raise EngineError(
                f"run: program index {index} out of range; the engine has "
                f"{len(self.roots)} program(s)"
            )
        show = self._loops[index] and progress_bars.progress_bars_enabled(self.run_progress)
        rt.loop_progress = _loop_bar if show else None
        with self._profiles.run(rt, index):
            self._replay.run(rt, index, self.roots[index])

    @property
    def count_cycles(self) -> bool:
        """Whether every run's cycles are modelled (:meth:`run_cycles`), also the runs past
        ``autoReport.executionProfileProgramRunCount``: those then move a timeline that
        records no steps, which costs some time per run (off by default: they model no
        cycles). The captured runs' cycles are always known."""
        return self._profiles.count_cycles

    @count_cycles.setter
    def count_cycles(self, on: bool) -> None:
        with self.lock:
            self._profiles.count_cycles = bool(on)

    @locked
    def run_cycles(self, index: int = 0) -> int:
        """The modelled cycles of the last run of program ``index`` (replica 0's timeline:
        its latest tile clock after the run minus the latest before it), as a cycle
        counter read at the program's start and end would give. The runs since load or
        ``reset_execution_profile`` add up to the execution profile's
        ``simulation.cycles``; the same program, inputs and clocks give the same count.

        Raises:
            EngineError: the engine is not loaded; ``index`` is not a program; the program
                has not run since load; its last run was past the execution profile's run
                count without :attr:`count_cycles`; the CPU target (no cycle model).
        """
        _ = self.runtime  # raises when not loaded
        return self._profiles.cycles_of(index, self.target.is_cpu)

    @locked
    def flush_report(self) -> None:
        """Write autoReport's ``execution.json`` now if programs ran since it was last
        written (a PopXL ``Session`` does this when it detaches)."""
        self._profiles.flush()

    @locked
    def close(self) -> None:
        """Write autoReport's pending ``execution.json`` and unload the engine (``load``
        makes it usable again). Also done when the engine is collected, when the
        interpreter exits, and on leaving ``with engine:``."""
        self._profiles.flush()
        self._runtime = self._profiles.runtime = None
        self._replay = TimelineReplay(self.roots)  # drops the plans bound to the old state

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- host data ----
    @locked
    def connect_stream(self, name: str, buffer_or_callback: Any) -> None:
        """Connect a stream to a host buffer (consumed or filled one transfer at a time,
        circularly) or to a callback called with one transfer's array."""
        stream = self.state.streams.get(name)
        if stream is None:
            raise StreamError(
                f"connect_stream: no stream named {name!r}; streams: {sorted(self.state.streams)}"
            )
        streams = self.runtime.streams
        conn = streams.get(name)
        if conn is not None and conn.rebind(buffer_or_callback):
            return  # the same stream again with a buffer of the same layout
        streams[name] = StreamConnection(stream, buffer_or_callback, self.replicas)

    @locked
    def connect_host_function(
        self, name: str, fn: Callable[..., Any], all_replicas: bool = False
    ) -> None:
        """Connect host function ``name`` to ``fn(inputs, outputs)``, which receives lists
        of arrays and fills ``outputs`` in place or returns them.

        Args:
            name: the host function.
            fn: the callback. It is called once per replica with flat arrays (Poplar's
                behaviour), or, with ``all_replicas``, once per call with ``[replica, n]``
                arrays of the replicas making the call (all of them, unless replicas took
                different branches), so that it can treat the replicas' data together
                (sum them, apply them at once). An exception it raises fails the run.
            all_replicas: see ``fn``.
        """
        if name not in self.state.host_functions:
            raise EngineError(
                f"connect_host_function: no host function named {name!r}; "
                f"host functions: {sorted(self.state.host_functions)}"
            )
        if not callable(fn):
            raise EngineError(f"connect_host_function({name!r}): {fn!r} is not callable")
        self.runtime.host_functions[name] = (fn, bool(all_replicas))

    def _handle(self, table: dict[str, Tensor], name: str, what: str) -> Tensor:
        t = table.get(name)
        if t is None:
            raise StreamError(f"{what}: no handle named {name!r}; handles: {sorted(table)}")
        return t

    @locked
    def write_tensor(self, name: str, data: Any) -> None:
        """Write a tensor through a ``create_host_write`` handle: data of the tensor's
        shape (every replica) or ``[replicas, *shape]``."""
        t = self._handle(self.state.host_writes, name, "write_tensor")
        arr = exact_cast(data, t.dtype, f"write_tensor({name!r})")
        R, n = self.replicas, t.num_elements
        if arr.size == n:
            rows = np.broadcast_to(arr.reshape(1, n), (R, n))
        elif arr.size == R * n and (R == 1 or arr.shape[0] == R):
            rows = arr.reshape(R, n)
        else:
            raise StreamError(
                f"write_tensor({name!r}): data of shape {arr.shape} ({arr.size} "
                f"elements); expected {t.shape} or ({R}, *{t.shape})"
            )
        Gather.of(t.dtype, t.addresses).write(self.runtime.storage, slice(None), rows)

    @locked
    def read_tensor(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Read a tensor through a ``create_host_read`` handle: the tensor's shape, with a
        leading replica axis when the graph is replicated."""
        t = self._handle(self.state.host_reads, name, "read_tensor")
        data = Gather.of(t.dtype, t.addresses).read(self.runtime.storage, slice(None))
        shape = t.shape if self.replicas == 1 else (self.replicas, *t.shape)
        if out is None:
            return data.reshape(shape).copy()
        what = f"read_tensor({name!r})"
        if not isinstance(out, np.ndarray):
            raise StreamError(
                f"{what}: the output buffer must be a NumPy array, got {type(out).__name__}"
            )
        checks = (
            (
                out.dtype != t.dtype.numpy,
                f"the output buffer is {out.dtype}; the tensor is {t.dtype} ({t.dtype.numpy})",
            ),
            (not out.flags.writeable, "the output buffer is read-only"),
            (not out.flags.c_contiguous, "the output buffer must be C-contiguous"),
            (
                out.size != data.size,
                f"output buffer has {out.size} elements, tensor has {data.size}",
            ),
        )
        problem = next((message for bad, message in checks if bad), "")
        if problem:
            raise StreamError(f"{what}: {problem}")
        out.reshape(shape)[...] = data.reshape(shape)
        return out

    def _replica(self, replica: int | None, what: str, name: str) -> int | slice:
        if replica is None:
            return slice(None)
        if not 0 <= replica < self.replicas:
            raise StreamError(
                f"{what}({name!r}): replica {replica} out of range; the graph has "
                f"{self.replicas} replica(s)"
            )
        return int(replica)

    def _remote(self, name: str, row: int, what: str) -> np.ndarray:
        buf = self.runtime.remote.get(name)
        if buf is None:
            raise StreamError(
                f"{what}: no remote buffer named {name!r}; remote buffers: "
                f"{sorted(self.runtime.remote)}"
            )
        if not 0 <= row < buf.shape[1]:
            raise StreamError(
                f"{what}({name!r}): repeat index {row} out of range [0, {buf.shape[1]})"
            )
        return buf

    @locked
    def copy_to_remote_buffer(
        self, name: str, data: Any, repeat_index: int = 0, replica: int | None = None
    ) -> None:
        buf = self._remote(name, repeat_index, "copy_to_remote_buffer")
        arr = exact_cast(
            data, self.state.remote_buffers[name].dtype, f"copy_to_remote_buffer({name!r})"
        )
        if arr.size != buf.shape[2]:
            raise StreamError(
                f"copy_to_remote_buffer({name!r}): {arr.size} elements, rows have {buf.shape[2]}"
            )
        buf[self._replica(replica, "copy_to_remote_buffer", name), repeat_index] = arr.reshape(-1)

    @locked
    def copy_from_remote_buffer(
        self, name: str, repeat_index: int = 0, replica: int = 0
    ) -> np.ndarray:
        buf = self._remote(name, repeat_index, "copy_from_remote_buffer")
        return buf[self._replica(replica, "copy_from_remote_buffer", name), repeat_index].copy()

    @locked
    def write_remote_buffer(self, name: str, data: Any, replica: int | None = None) -> None:
        """Write every repeat of remote buffer ``name`` at once: ``data`` is
        ``[repeats, elements]`` (any shape of that size), for one replica or, with
        ``replica=None``, for every replica (a Tremula extension of
        ``copy_to_remote_buffer``, which writes one repeat)."""
        buf = self._remote(name, 0, "write_remote_buffer")
        arr = exact_cast(
            data, self.state.remote_buffers[name].dtype, f"write_remote_buffer({name!r})"
        )
        if arr.size != buf.shape[1] * buf.shape[2]:
            raise StreamError(
                f"write_remote_buffer({name!r}): {arr.size} elements; the buffer holds "
                f"{buf.shape[1]} repeats of {buf.shape[2]}"
            )
        rows = self._replica(replica, "write_remote_buffer", name)
        buf[rows] = arr.reshape(buf.shape[1:])

    @locked
    def read_remote_buffer(self, name: str, replica: int = 0) -> np.ndarray:
        """Every repeat of remote buffer ``name`` of one replica, ``[repeats, elements]``
        (a copy)."""
        buf = self._remote(name, 0, "read_remote_buffer")
        return buf[self._replica(replica, "read_remote_buffer", name)].copy()

    # ---- profiles ----
    @property
    def report_directory(self) -> str | None:
        """The folder autoReport writes this engine's files into, or None when it is off:
        ``autoReport.directory``, or a subfolder of it so that no other engine of this
        process and no other instance of a PopRun job overwrites them
        (``profiles.claim_directory``)."""
        return self._profiles.directory if self.options.auto_report else None

    @locked
    def get_graph_profile(self) -> dict[str, Any]:
        """The graph profile; an instance of a PopRun job adds its ``instances`` section
        (its replicas, the copies to and from other instances with bytes and cycles)."""
        return self._profiles.graph()

    @locked
    def get_execution_profile(self) -> dict[str, Any]:
        """The execution profile: the first ``autoReport.executionProfileProgramRunCount``
        runs (default 2) of each program since load or reset."""
        return self._profiles.execution(self.runtime)

    def get_profile(self) -> dict[str, Any]:
        return {
            "graphProfile": self.get_graph_profile(),
            "executionProfile": self.get_execution_profile(),
        }

    @locked
    def reset_execution_profile(self) -> None:
        rt = self.runtime
        rt.tl.reset()
        rt.cs_cycles[...] = 0
        self._profiles.reset()

    @locked
    def write_report(self, directory: str) -> None:
        """Write ``graph.json`` and ``execution.json`` into ``directory`` now (those autoReport
        writes, when it is set), and ``report.html`` when ``autoReport.outputHtml`` is set.
        Each file is replaced atomically."""
        o = self.options
        self._profiles.write(
            directory,
            graph=o.report_graph or not o.auto_report,
            execution=o.report_execution or not o.auto_report,
        )

    def profile_summary(self, show_execution_steps: bool = False) -> str:
        execution = self.get_execution_profile() if self._runtime is not None else None
        return profile_format.summarise(
            self.get_graph_profile(), execution, show_execution_steps=show_execution_steps
        )

    def print_profile_summary(
        self, out: TextIO | None = None, options: dict[str, str] | None = None
    ) -> None:
        steps = str((options or {}).get("showExecutionSteps", "false")).lower() == "true"
        print(self.profile_summary(steps), file=out or sys.stdout)
