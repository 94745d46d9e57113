"""``Session``: compile an Ir for a device (``"ipu_model"``, ``"cpu"``, ``"ipu_hw"``), attach,
move weights, run.

The only module of the frontend that reaches down into lowering and the engine (DESIGN).
Semantics follow ``spec/popxl.md`` section 1.10: compiled at construction, not attached;
``with session:`` attaches and writes weights from the host; leaving the outermost context
writes them back (unless ``weights_to_host_on_exit=False``) and detaches; ``run`` needs an
attached session; ``get_tensor_data`` reads device weights lazily.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import poplar
from tremula.engine.engine import COMPILE_STAGES, locked
from tremula.engine.options import parse_options
from tremula.errors import StreamError
from tremula.popxl._ir.core.log import LOG
from tremula.popxl.fit import check_sizes
from tremula.popxl.ir import Ir
from tremula.popxl.replica_grouping import group_rows, replica_rows, shard_rows, unshard_rows
from tremula.popxl.session_device import check_execution_contexts, device_for
from tremula.popxl.session_io import HostStreams
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream
from tremula.popxl.tensor import Constant, Tensor, Variable
from tremula.progress import bar as progress_bar

if TYPE_CHECKING:
    from tremula.lowering.context import VariableHandles


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time (so redirection and capture work)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()
#: PopART's device logger: the weight transfers log there as PopART's Devicex does
_DEVICEX = LOG.getChild("devicex")

#: what ``Session.run`` takes and gives (PopXL's type aliases, ``popxl.session``)
h2dStreamBufferMaps = Mapping[HostToDeviceStream, np.ndarray]
d2hStreamBufferMaps = Mapping[DeviceToHostStream, np.ndarray]


class Session:
    """A compiled Ir on a device.

    Args:
        ir: the program.
        device_desc: ``"ipu_model"``, ``"cpu"``, ``"ipu_hw"`` (an IPU Model), or a device
            (a ``popart.DeviceInfo`` from ``popart.DeviceManager``, or a
            ``tremula.poplar.Device``) with a multiple of the IPUs the Ir needs.
        weights_to_host_on_exit: read the weights back when leaving the outermost
            ``with session:``.
        progress: (Tremula option) show progress bars while compiling and, in ``run``, per
            iteration of the program's on-device loops (``ops.repeat``): None (the
            default, see ``tremula.progress``) on a terminal when ``tqdm`` is installed,
            or True / False.
        engine_options: Poplar engine options (Tremula extension, keyword only; what
            PopART's ``SessionOptions.engineOptions`` passes): ``autoReport.all``,
            ``autoReport.directory``, ``debug.allowOutOfMemory``, ...
    """

    def __init__(
        self,
        ir: Ir,
        device_desc: str | poplar.Device = "cpu",
        weights_to_host_on_exit: bool = True,
        *,
        progress: bool | None = None,
        engine_options: Mapping[str, Any] | None = None,
    ) -> None:
        from tremula.lowering import Lowerer  # the frontend's one door into lowering
        from tremula.popxl._ir import verify_ir

        if not isinstance(ir, Ir):
            raise TypeError(f"Session: expected a popxl.Ir, got {type(ir).__name__}")
        verify_ir(ir)  # an Ir edited through the bindings may be left inconsistent
        check_execution_contexts(ir)
        self._ir = ir
        self._device = device_for(device_desc, ir)
        # the graph is the global one (R replicas); an instance of a PopRun job runs its
        # block of L replicas (rows 0..L-1 of the engine's data) and reaches the others
        # over MPI
        self._R, self._L = ir.replication_factor, ir.instance_replication_factor
        self._local = slice(ir._replica_offset, ir._replica_offset + self._L)
        options = {}
        if self._L < self._R:
            from tremula import popdist

            popdist.init()  # once per process, as PopXL does
            options = {
                "target.firstRuntimeReplica": ir._replica_offset,
                "target.numberRuntimeReplica": self._L,
            }
        graph = poplar.Graph(self._device.target, replication_factor=self._R)
        allow_oom = parse_options(dict(engine_options or {})).allow_out_of_memory
        check_sizes(ir, graph.target, allow_oom)
        total = sum(len(g.ops) for g in ir.graphs) + len(COMPILE_STAGES)
        with progress_bar(total, "compiling: lowering ops", "step", progress) as bar:
            self._lowerer = Lowerer(graph, ir, on_lowered=bar.update)
            programs = self._lowerer.lower_programs()
            #: whether the weights-from/to-host fragments (engine programs 1, 2) have ops
            self._fragments = [bool(p.programs) for p in programs[1:]]
            self._check_remote_variables()
            options = {**(engine_options or {}), **options}
            self._engine = poplar.Engine(
                graph,
                programs if any(self._fragments) else programs[0],
                options,
                progress=bar,
                run_progress=progress,
            )
        ir._prepared = True
        self._weights_to_host_on_exit = weights_to_host_on_exit
        self._loaded = False
        self._attached = False
        #: per open ``with session:``, whether it found the session attached (PopXL's
        #: stack; a device instead of False is given back to the session on leaving)
        self._was_attached_stack: list[bool | poplar.Device] = []
        self._host_stale = False  # device weights newer than the host copies
        self._io = HostStreams(ir, self._L, self._lowerer.h2d, self._lowerer.d2h)
        self._shards: dict[Variable, Variable] = {  # on-device shard -> sharded variable
            shard: v for v in ir.main_graph.variables if (shard := v.shard) is not None
        }

    # ---- properties ----
    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def is_attached(self) -> bool:
        return self._attached

    @property
    def engine(self) -> poplar.Engine:
        return self._engine

    @property
    def lock(self) -> Any:
        """The engine's re-entrant lock: every method that attaches, runs or moves data
        holds it, so one session can be used from several threads (their calls run one at
        a time); two sessions have two locks and run side by side."""
        return self._engine.lock

    @property
    def _pb_session(self) -> Any:
        """This session in PopXL's IR bindings (PopART's session: ``writeWeights``,
        ``weightsFromHost``, ...)."""
        from tremula.popxl._ir import session_handle

        return session_handle(self)

    # ---- attach / detach ----
    @locked
    def __enter__(self) -> Session:
        was_attached = self._attached
        if not was_attached:
            self._attach()
            self.weights_from_host()
        self._was_attached_stack.append(was_attached)
        return self

    @locked
    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        was_attached_or_device = self._was_attached_stack.pop()
        if was_attached_or_device is True:
            return  # an inner context
        if self._attached:  # (not when detached inside the context: _unload)
            if exc_type is None and self._weights_to_host_on_exit:
                self.weights_to_host()
            self._detach()
        if isinstance(was_attached_or_device, poplar.Device):
            self._set_device(was_attached_or_device)

    def _detach(self) -> None:
        """Leave the device (the program stays loaded unless ``_unload`` is called)."""
        self._attached = False
        self._engine.flush_report()  # autoReport's execution.json, once per attach

    def _unload(self) -> None:
        """Detach and forget the loaded program (PopART's ``setEngineIsLoaded(False)``):
        the next attach loads it again, with the weights of the host copies."""
        if self._attached:
            self._detach()
        self._loaded = False

    @locked
    def _set_device(self, device: poplar.Device) -> None:
        """Use ``device`` (a ``popart.DeviceInfo`` or ``poplar.Device``) from the next
        attach on (PopXL's helper: programs that detach a device and attach another give
        it back this way). The device must be one the program was compiled for: the same
        target (IPU version, IPUs, tiles), or the CPU device for a 'cpu' session.

        Raises:
            TypeError: not a device.
            ValueError: a device of another target, or the session is attached (the
                program is loaded on its device).
        """
        if not isinstance(device, poplar.Device):
            raise TypeError(
                f"Session._set_device: expected a popart.DeviceInfo or poplar.Device, got "
                f"{type(device).__name__}"
            )
        if self._attached:
            raise ValueError(
                "Session._set_device: the session is attached; leave `with session:` first"
            )
        if device.target != self._device.target:
            raise ValueError(
                f"Session._set_device: {device!r} is not the device this session was "
                f"compiled for ({self._device!r})"
            )
        if device is not self._device:
            self._device = device
            self._loaded = False  # loaded onto the new device at the next attach

    def _attach(self) -> None:
        if not self._loaded:
            self._engine.load(self._device)
            self._engine.runtime.out = _STDERR  # PopXL prints tensors to stderr
            self._loaded = True
        self._attached = True

    def _require_attached(self, what: str) -> None:
        if not self._attached:
            raise ValueError(
                f"Session.{what}: the session is not attached to a device; use `with session:`"
            )

    # ---- weights ----
    # Device variables have a Poplar tensor (with host write/read handles); remote variables
    # live in a remote-buffer entry; a replica-sharded variable's shard is a device variable
    # whose rows are the shards of the full variable (its host copy). Host copies hold
    # ``shape_on_host``; ``replica_grouping.py`` maps them to one row per replica and back.
    def _device_variables(self) -> list[tuple[Variable, VariableHandles]]:
        return [(v, h) for v, h in self._lowerer.variables.items() if v.remote is None]

    def _remote_variables(self) -> list[Variable]:
        return [v for v in self._ir.main_graph.variables if v.remote is not None]

    def _shard_owner(self, v: object) -> Variable | None:
        """The replica-sharded variable whose on-device shard ``v`` is (else None)."""
        return self._shards.get(v) if isinstance(v, Variable) else None

    @staticmethod
    def _host_array(v: Variable) -> np.ndarray:
        return np.asarray(v.host_data).astype(v.dtype.as_numpy(), copy=False)

    def _rows(self, v: Variable) -> np.ndarray:
        """``[R, ...]``: each replica's value of ``v`` (its shard, for a sharded variable)."""
        if v.shard_over is not None:
            return shard_rows(v.replica_grouping, v.shard_over, self._host_array(v), v.shape)
        return replica_rows(v.replica_grouping, self._host_array(v), v.shape)

    def _from_rows(self, v: Variable, rows: np.ndarray) -> np.ndarray:
        """``v``'s host data from ``[R, ...]`` per-replica values (or shards)."""
        if v.shard_over is not None:
            return unshard_rows(v.replica_grouping, v.shard_over, rows, v.shape)
        return group_rows(v.replica_grouping, rows, v.shape)

    def _check_remote_variables(self) -> None:
        """Each remote variable whose buffer the program uses fits one entry of it (as many
        elements as the variable on a replica, or as its shard; the same dtype), at an
        offset below ``entries``, alone (PopXL leaves these to its compiler).

        Raises:
            StreamError: (a ``ValueError``) naming the variable and the buffer.
        """
        taken: dict[tuple[Any, int], Variable] = {}
        for v in self._remote_variables():
            if v.remote is None or v.remote[0] not in self._lowerer.remote:
                continue
            buffer, entry = v.remote
            shards = v.shard_over
            n = v.nelms if shards is None else -(-v.nelms // shards)
            what = f"Session: remote variable {v.id!r} ({v.dtype}, {n} elements per replica"
            what += ")" if shards is None else f" in shards over {shards} replicas)"
            if math.prod(buffer.tensor_shape) != n or buffer.tensor_dtype != v.dtype:
                raise StreamError(
                    f"{what} does not fit an entry of {buffer!r} "
                    f"({math.prod(buffer.tensor_shape)} elements): make the buffer with the "
                    f"variable's shape without the replica-group axis"
                )
            if entry >= buffer.entries:
                raise StreamError(f"{what}: entry {entry} is out of range for {buffer!r}")
            other = taken.setdefault((buffer, entry), v)
            if other is not v:
                raise StreamError(f"{what}: entry {entry} of {buffer!r} already holds {other.id!r}")

    def _remote_entry(self, v: Variable) -> tuple[str, int] | None:
        """(Poplar remote buffer name, entry) of a remote variable whose buffer the program
        uses (None if no op uses it: the host copy is then its only copy)."""
        if v.remote is None:
            return None
        buffer, entry = v.remote
        rb = self._lowerer.remote.get(buffer)
        return None if rb is None else (rb.name, entry)

    @locked
    def weights_from_host(self) -> None:
        """Write every variable's host copy to the device (remote variables to their
        remote-buffer entries, replica-sharded ones to their shards)."""
        self._require_attached("weights_from_host")
        self._collective("weights_from_host")
        _DEVICEX.debug("Writing weights from host, ")
        local = self._local
        for v, h in self._device_variables():
            owner = self._shard_owner(v)
            self._engine.write_tensor(h.write, self._rows(v if owner is None else owner)[local])
        for v in self._remote_variables():
            where = self._remote_entry(v)
            if where is not None:
                same = v.replica_grouping.num_groups == 1 and v.shard_over is None
                self._write_entry(where, self._rows(v), same)
        if self._fragments[0]:
            self._engine.run(1)  # the ops made in ExecutionContext.WeightsFromHostFragment
        self._host_stale = False
        _DEVICEX.debug("done.")

    def _collective(self, what: str) -> None:
        """In a PopRun job, check that every instance makes this device call now (they
        are collective); nothing in one process."""
        if self._L < self._R:
            from tremula.popdist import backend

            backend.agree(what)

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """``[R, ...]`` from this process's ``[L, ...]`` replica rows (every instance's,
        in replica order, in a PopRun job)."""
        return self._engine.runtime_replicas.gather_rows(rows)

    @locked
    def weights_to_host(self) -> None:
        """Read every variable from the device into its host copy (a replica-sharded
        variable from its shards, which are also stored back to its remote buffer)."""
        self._require_attached("weights_to_host")
        self._collective("weights_to_host")
        _DEVICEX.debug("Writing weights to host")
        R, L = self._R, self._L
        if self._fragments[1]:
            self._engine.run(2)  # the ops made in ExecutionContext.WeightsToHostFragment
        synced = set()
        for v, h in self._device_variables():
            rows = self._gather(self._engine.read_tensor(h.read).reshape(L, *v.shape))
            owner = self._shard_owner(v)
            if owner is None:
                v.store_host(group_rows(v.replica_grouping, rows, v.shape))
                continue
            owner.store_host(self._from_rows(owner, rows))
            synced.add(owner)
            where = self._remote_entry(owner)
            if where is not None:  # the shard is stored back to its remote buffer
                self._write_entry(where, rows, R == 1)
        for v in self._remote_variables():
            where = self._remote_entry(v)
            if v in synced or where is None:
                continue
            rows = np.stack(
                [self._engine.copy_from_remote_buffer(where[0], where[1], r) for r in range(L)]
            )
            if v.shard_over is None:  # entries are flat: the variable may have any shape
                rows = rows.reshape(L, *v.shape)
            v.store_host(self._from_rows(v, self._gather(rows)))
        self._host_stale = False
        _DEVICEX.debug("Writing weights to host complete.")

    def _write_entry(self, where: tuple[str, int], rows: np.ndarray, same: bool) -> None:
        """Write ``[R, ...]`` rows to a remote-buffer entry of every replica of this process
        (one transfer to all of them when every replica gets the same value)."""
        name, entry = where
        if same:
            self._engine.copy_to_remote_buffer(name, rows[0], entry)
            return
        local = rows[self._local]
        for r in range(self._L):
            self._engine.copy_to_remote_buffer(name, local[r], entry, r)

    def get_tensor_data(self, t: Tensor) -> np.ndarray:
        """A variable's or constant's value (syncing from the device if it ran since).

        Raises:
            TypeError: ``t`` is not a Variable or Constant.
        """
        return self.get_tensors_data([t])[t]

    @locked
    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, np.ndarray]:
        """The values of variables and constants: ``shape_on_host`` for ``"one_per_group"``
        variables (the first replica of each group), ``(R, *shape)`` for ``"all_replicas"``
        ones of groups of several replicas. Syncs from the device once if it ran since.

        Raises:
            TypeError: a tensor is not a Variable or Constant.
        """
        tensors = list(tensors)
        for t in tensors:
            self._check_variable(t, "get_tensor_data", (Variable, Constant))
        if self._attached and self._host_stale:
            self.weights_to_host()
        return {t: self._host_value(t) for t in tensors}

    def _check_variable(self, t: Any, what: str, kinds: tuple[type, ...]) -> None:
        names = " or ".join(k.__name__ for k in reversed(kinds))
        if not isinstance(t, kinds):  # PopXL's words: "Tensor <id> is not of type ..."
            tid = getattr(t, "id", None) or getattr(t, "tensor_id", None) or repr(t)
            raise TypeError(f"Tensor {tid} is not of type {names}. ({what}: got {t!r})")
        owner = self._shard_owner(t)
        if owner is not None:
            raise TypeError(
                f"{what}: {t!r} is the on-device shard of the replica-sharded variable "
                f"{owner.id!r}; use that variable"
            )

    def _host_value(self, t: Tensor) -> np.ndarray:
        """A copy of the host value; for a variable made from a ``np.memmap`` whose host
        layout is its data's, that very memmap (PopXL keeps it by reference)."""
        if isinstance(t, Constant):
            return np.array(t.host_data)
        if not isinstance(t, Variable):
            raise TypeError(f"Tensor {t.id} is not of type Constant or Variable.")
        v = t
        rg = v.replica_grouping
        if v.retrieval_mode == "all_replicas" and rg.group_size > 1:
            return replica_rows(rg, np.array(v.host_data), v.shape)
        if isinstance(v.host_data, np.memmap):
            return v.host_data
        return np.array(v.host_data)

    def write_variable_data(self, var: Variable, data: Any) -> None:
        """Set a variable's value (``shape_on_host``); see :meth:`write_variables_data`."""
        self.write_variables_data({var: data})

    @locked
    def write_variables_data(self, values: Mapping[Variable, Any]) -> None:
        """Set variables' values. Each value must have the variable's ``shape_on_host`` and
        exactly its dtype (Python numbers and lists are converted). The host copies are
        updated; when attached, the device too (other weights keep their device values).

        Raises:
            TypeError: not a Variable, or a dtype mismatch.
            ValueError: a shape other than ``shape_on_host``.
            NotImplementedError: an ``"all_replicas"`` variable of groups of several
                replicas.
        """
        checked = {var: self._checked_value(var, data) for var, data in values.items()}
        if self._attached and self._host_stale:
            self.weights_to_host()  # keep the device values of the other weights
        for var, arr in checked.items():
            var.store_host(arr)
        if self._attached:
            self.weights_from_host()

    def _checked_value(self, var: Any, data: Any) -> np.ndarray:
        self._check_variable(var, "write_variable_data", (Variable,))
        if var.retrieval_mode == "all_replicas" and var.replica_grouping.group_size > 1:
            raise NotImplementedError(
                f"write_variable_data: {var.id!r} has retrieval_mode 'all_replicas' with "
                f"groups of {var.replica_grouping.group_size} replicas; only 'one_per_group' "
                f"variables can be written"
            )
        want = var.dtype.as_numpy()
        if isinstance(data, np.ndarray):
            if data.dtype != want:
                raise TypeError(
                    f"write_variable_data: {var.id!r} is {var.dtype}, got data of type {data.dtype}"
                )
            arr = data
        else:
            arr = np.asarray(data, dtype=want)
        if arr.shape != var.shape_on_host:
            raise ValueError(
                f"write_variable_data: {var.id!r} needs data of shape_on_host "
                f"{var.shape_on_host}, got {arr.shape}"
            )
        return np.array(arr)

    # ---- running ----
    def _validate_run_inputs(self, inputs: Mapping[Any, Any]) -> None:
        """Check ``run``'s inputs as ``run`` does (PopXL's helper): keyed by exactly the
        host-to-device streams the program reads, each array of its host shape
        (``[num_host_transfers if > 1] + [replicas if > 1] + stream.shape``) and
        convertible to its stream's type.

        Raises:
            ValueError: missing or unexpected streams, or a wrong shape (naming the stream).
            TypeError: a value that cannot be the stream's type.
        """
        self._io.check_inputs(inputs, True)

    def _validate_run_outputs(self, outputs: Mapping[Any, Any]) -> None:
        """Check ``run_with_outputs``'s outputs (PopXL's helper): keyed by exactly the
        device-to-host streams the program writes, each a writable array of the stream's
        type and host shape.

        Raises:
            ValueError: missing or unexpected streams, a wrong shape or a read-only array.
            TypeError: not a NumPy array, or another dtype.
        """
        self._io.check_outputs(outputs)

    def expected_inputs(self) -> set[HostToDeviceStream]:
        """The host-to-device streams a run needs (those some executed host_load reads)."""
        return set(self._lowerer.h2d)

    def create_host_outputs(self) -> dict[DeviceToHostStream, np.ndarray]:
        """Zeroed output arrays, ``[num_host_transfers?, replicas?] + stream.shape``."""
        return self._io.create_outputs()

    @locked
    def run(
        self, inputs: Mapping[Any, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[DeviceToHostStream, np.ndarray]:
        """Run the program once: ``inputs`` maps each h2d stream to its host array; returns
        an array per d2h stream (see :meth:`run_with_outputs`)."""
        self._require_attached("run")
        outputs = self.create_host_outputs()
        self.run_with_outputs(inputs, outputs, downcast_inputs)
        return outputs

    @locked
    def run_with_outputs(
        self,
        inputs: Mapping[Any, Any] | None,
        outputs: Mapping[DeviceToHostStream, np.ndarray],
        downcast_inputs: bool = True,
    ) -> None:
        """Run the program once, filling ``outputs``.

        Every array is ``[num_host_transfers if > 1] + [replicas if > 1] + stream.shape``
        (any all-ones shape where that is all ones). Each executed ``host_load`` takes the
        next slice of its stream (per replica), each ``host_store`` writes the next one;
        slices not written keep their values.

        Raises:
            ValueError: not attached, streams missing or unexpected, or a wrong shape.
            TypeError: an output that is not a NumPy array.
        """
        self._require_attached("run_with_outputs")
        io = self._io
        arrays = io.check_inputs(inputs or {}, downcast_inputs)
        io.check_outputs(outputs)
        self._collective("Session.run")
        with ExitStack() as hooks:  # host state the program needs (lowering's run hooks)
            for hook in self._lowerer.run_hooks:
                hooks.enter_context(hook(self))
            for s, arr in arrays.items():
                self._engine.connect_stream(s.tensor_id, io.to_engine(arr))
            buffers = {s: io.output_buffer(s, outputs[s]) for s in self._lowerer.d2h}
            for s, buf in buffers.items():
                self._engine.connect_stream(s.tensor_id, buf)
            self._engine.run(0)
            self._host_stale = True
        for s, buf in buffers.items():
            io.fill_output(s, buf, outputs[s])
