"""``Session``: compile an Ir for a device (``"ipu_model"``, ``"cpu"``, ``"ipu_hw"``), attach,
move weights, run.

The only module of the frontend that reaches down into lowering and the engine (DESIGN);
the weight methods are ``session_weights.py``'s (its base class).
Semantics are PopXL's: compiled at construction, not attached;
``with session:`` attaches and writes weights from the host; leaving the outermost context
writes them back (unless ``weights_to_host_on_exit=False``) and detaches; ``run`` needs an
attached session; ``get_tensor_data`` reads device weights lazily. The device is attached
while the session is (``session.device.detach()`` detaches the session too).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from typing import Any

import numpy as np

from tremula import poplar
from tremula.engine.engine import COMPILE_STAGES, locked
from tremula.engine.options import parse_options
from tremula.popxl.ambiguity import check_inplacing_ambiguity
from tremula.popxl.fit import check_sizes
from tremula.popxl.ir import Ir
from tremula.popxl.session_device import (
    check_execution_contexts,
    check_replica_groupings,
    device_for,
    online_device,
)
from tremula.popxl.session_io import HostStreams
from tremula.popxl.session_weights import SessionWeights
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream
from tremula.popxl.tensor import Variable
from tremula.progress import bar as progress_bar


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time (so redirection and capture work)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()

#: what ``Session.run`` takes and gives (PopXL's type aliases, ``popxl.session``)
h2dStreamBufferMaps = Mapping[HostToDeviceStream, np.ndarray]
d2hStreamBufferMaps = Mapping[DeviceToHostStream, np.ndarray]


class Session(SessionWeights):
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
        engine_options: Poplar engine options (Tremula extension, keyword only):
            ``autoReport.all``, ``autoReport.directory``, ``debug.allowOutOfMemory``, ...,
            over those of the Ir's PopART ``SessionOptions.engineOptions``
            (``ir._pb_ir.getSessionOptions().engineOptions``), which PopXL's session
            makes its engine with.
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
        from tremula.popxl._ir.ir import session_options

        if not isinstance(ir, Ir):
            raise TypeError(f"Session: expected a popxl.Ir, got {type(ir).__name__}")
        verify_ir(ir)  # an Ir edited through the bindings may be left inconsistent
        check_execution_contexts(ir)
        pb_options = session_options(ir)
        if pb_options.enableInplaceAmbiguityChecking:  # PopXL's Ir enables it
            check_inplacing_ambiguity(ir)
        # PopART makes the engine with the Ir's SessionOptions.engineOptions
        user_options = {**dict(pb_options.engineOptions), **dict(engine_options or {})}
        self._ir = ir
        self._device = device_for(device_desc, ir)
        check_replica_groupings(ir)  # after the device's own checks of the replicas
        if isinstance(device_desc, str):
            self._device.detach()  # made for the session, which attaches it when entered
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
        allow_oom = parse_options(user_options).allow_out_of_memory
        check_sizes(ir, graph.target, allow_oom)
        total = sum(len(g.ops) for g in ir.graphs) + len(COMPILE_STAGES)
        with progress_bar(total, "compiling: lowering ops", "step", progress) as bar:
            self._lowerer = Lowerer(graph, ir, on_lowered=bar.update)
            programs = self._lowerer.lower_programs()
            #: whether the weights-from/to-host fragments (engine programs 1, 2) have ops
            self._fragments = [bool(p.programs) for p in programs[1:]]
            self._check_remote_variables()
            options = {**user_options, **options}
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
        self._d2h_noted: set[Variable] = set()  # variables read back once (a log line each)
        #: the rows the last weights_to_host read of "all_replicas" variables of groups of
        #: several replicas: each replica's own value (PopART's readWeights copies every
        #: replica's slot); the host copy keeps each group's first replica's
        self._replica_values: dict[Variable, np.ndarray] = {}
        self._io = HostStreams(ir, self._L, self._lowerer.h2d, self._lowerer.d2h)

    # ---- properties ----
    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def ir_(self) -> Ir:
        """The Ir (PopXL's attribute name for it, which its tests read)."""
        return self._ir

    def _get_ipu_count(self) -> int:
        """The number of IPUs the Ir needs on the device a device string makes (PopXL's
        helper): 2 ** ceil(log2(IPUs per replica x replicas))."""
        from tremula.popxl.session_device import ipu_count

        return ipu_count(self._ir)

    @property
    def device(self) -> poplar.Device:
        """The device the session runs on (PopXL's property): the ``popart.DeviceInfo``
        made for a ``device_desc`` string (``numIpus``, ``tilesPerIPU``, ``type``: ``Cpu``,
        ``IpuModel``, or ``Ipu`` for ``"ipu_hw"``), else the device given."""
        return self._device

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
        """Attach (and write the weights from the host) unless attached. A session compiled
        for an offline device (``popart.DeviceManager().createOfflineIPUDevice``, which
        cannot attach) runs on an IPU of that target until the outermost context ends,
        then has the offline device back (PopXL's stack of ``_was_attached_stack`` holds
        it meanwhile)."""
        if self.is_attached:
            self._was_attached_stack.append(True)
            return self
        offline = self._device
        online = online_device(offline)
        if online is not None:
            self._set_device(online)
        try:
            self._attach()
            self.weights_from_host()
        except BaseException:
            if self._attached:
                self._detach()
            if online is not None:
                self._set_device(offline)
            raise
        self._was_attached_stack.append(False if online is None else offline)
        return self

    @locked
    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        was_attached_or_device = self._was_attached_stack.pop()
        if was_attached_or_device is True:
            return  # an inner context
        # (not when detached inside the context: _unload, or the device detached)
        if self.is_attached and exc_type is None and self._weights_to_host_on_exit:
            self.weights_to_host()
        if self._attached:
            self._detach()
        if isinstance(was_attached_or_device, poplar.Device):
            self._set_device(was_attached_or_device)

    def _detach(self) -> None:
        """Leave the device, detaching it (the program stays loaded unless ``_unload`` is
        called)."""
        self._attached = False
        self._device.detach()
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
        """Attach the device (an offline one raises ``popart_exception``) and load the
        program on it unless loaded."""
        self._device.attach()
        if not self._loaded:
            self._engine.load(self._device)
            self._engine.runtime.out = _STDERR  # PopXL prints tensors to stderr
            self._loaded = True
        self._attached = True

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

    def _full_input_shape(self, shape: Iterable[int]) -> tuple[int, ...]:
        """The host array shape a stream of ``shape`` takes (PopXL's private helper, which
        Graphcore's models call): ``[num_host_transfers if > 1] + [replicas if > 1] +
        shape``, the replicas being this instance's."""
        return self._io.full_shape(shape)

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
        arrays = self._io.check_inputs(inputs or {}, downcast_inputs)
        outputs = self.create_host_outputs()  # (the checks of run_with_outputs hold)
        # the device writes the new arrays in place where they are its buffers' layout (one
        # replica here) and no other program of the engine could write them later
        self._run(arrays, outputs, in_place=self._io.replicas == 1 and not any(self._fragments))
        return outputs

    @locked
    def run_with_outputs(
        self,
        inputs: Mapping[Any, Any] | None = None,
        outputs: Mapping[DeviceToHostStream, np.ndarray] | None = None,
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
        arrays = self._io.check_inputs(inputs or {}, downcast_inputs)
        outputs = outputs or {}  # (None: a program that writes no stream)
        self._io.check_outputs(outputs)
        self._run(arrays, outputs)

    def _run(
        self,
        arrays: dict[Any, np.ndarray],
        outputs: Mapping[DeviceToHostStream, np.ndarray],
        in_place: bool = False,
    ) -> None:
        """Run once with checked inputs ``arrays`` (``HostStreams.check_inputs``), filling
        the checked ``outputs``: through buffers copied back after the run, or, with
        ``in_place``, as the device's buffers themselves (outputs that
        ``HostStreams.to_engine`` lays out as views, which the caller made for this run)."""
        self._collective("Session.run")
        hooks = self._lowerer.run_hooks
        if hooks:
            with ExitStack() as stack:  # host state the program needs (lowering's run hooks)
                for hook in hooks:
                    stack.enter_context(hook(self))
                self._run_engine(arrays, outputs, in_place)
        else:
            self._run_engine(arrays, outputs, in_place)

    def _run_engine(
        self,
        arrays: dict[Any, np.ndarray],
        outputs: Mapping[DeviceToHostStream, np.ndarray],
        in_place: bool,
    ) -> None:
        """:meth:`_run`'s streams and engine run."""
        io, engine = self._io, self._engine
        d2h = self._lowerer.d2h
        if in_place:
            buffers = {s: io.to_engine(io.as_codes(s, outputs[s])) for s in d2h}
        else:
            buffers = {s: io.output_buffer(s, outputs[s]) for s in d2h}
        # (a zero-element stream moves nothing: its lowering copies none)
        connect = {s.tensor_id: io.to_engine(arr) for s, arr in arrays.items() if arr.size}
        connect.update((s.tensor_id, buf) for s, buf in buffers.items() if buf.size)
        engine.connect_streams(connect)
        engine.run(0)
        self._host_stale = True
        if not in_place:
            for s, buf in buffers.items():
                io.fill_output(s, buf, outputs[s])
