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
from typing import Any

import numpy as np

from tremula import poplar
from tremula.popxl.ir import Ir
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream
from tremula.popxl.tensor import Constant, Tensor, Variable, to_numpy

_DEVICES = ("ipu_model", "cpu", "ipu_hw")
_HW_WARNED = [False]


def _device(desc: str, ir: Ir) -> poplar.Device:
    if not isinstance(desc, str) or desc not in _DEVICES:
        raise ValueError(f"Session: device_desc must be one of {_DEVICES}, got {desc!r}")
    if desc == "cpu":
        if ir.replication_factor > 1:
            raise ValueError(
                f"Session: the 'cpu' device does not replicate; this Ir has "
                f"replication_factor {ir.replication_factor} (use 'ipu_model')"
            )
        return poplar.Device.create_cpu_device()
    if desc == "ipu_hw" and not _HW_WARNED[0]:
        print("Tremula: 'ipu_hw' runs on the IPU Model (there is no hardware)", file=sys.stderr)
        _HW_WARNED[0] = True
    ipus = 2 ** math.ceil(math.log2(max(1, ir.replication_factor)))
    return poplar.IPUModel(num_ipus=ipus).create_device()


class Session:
    """A compiled Ir on a device."""

    def __init__(
        self, ir: Ir, device_desc: str = "cpu", weights_to_host_on_exit: bool = True
    ) -> None:
        from tremula.lowering import Lowerer  # the frontend's one door into lowering

        if not isinstance(ir, Ir):
            raise TypeError(f"Session: expected a popxl.Ir, got {type(ir).__name__}")
        self._ir = ir
        self._device = _device(device_desc, ir)
        graph = poplar.Graph(self._device.target, replication_factor=ir.replication_factor)
        self._lowerer = Lowerer(graph, ir)
        program = self._lowerer.lower_main()
        self._engine = poplar.Engine(graph, program)
        ir._prepared = True
        self._weights_to_host_on_exit = weights_to_host_on_exit
        self._loaded = False
        self._attached = False
        self._depth = 0
        self._host_stale = False  # device weights newer than the host copies

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

    # ---- attach / detach ----
    def __enter__(self) -> Session:
        if self._depth == 0 and not self._attached:
            self._attach()
            self.weights_from_host()
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            if exc_type is None and self._weights_to_host_on_exit:
                self.weights_to_host()
            self._attached = False

    def _attach(self) -> None:
        if not self._loaded:
            self._engine.load(self._device)
            self._loaded = True
        self._attached = True

    def _require_attached(self, what: str) -> None:
        if not self._attached:
            raise ValueError(
                f"Session.{what}: the session is not attached to a device; use `with session:`"
            )

    # ---- weights ----
    def _variables(self) -> list[Variable]:
        return list(self._lowerer.variables)

    def _replica_rows(self, v: Variable, data: np.ndarray) -> np.ndarray:
        """Host data (``shape_on_host``) as one row per replica."""
        rg = v.replica_grouping
        R = self._ir.replication_factor
        if rg.num_groups == 1:
            return np.broadcast_to(data.reshape(1, *v.shape), (R, *v.shape))
        groups = np.asarray(rg.assignment)
        return data[groups]

    def weights_from_host(self) -> None:
        """Write every variable's host copy to the device."""
        self._require_attached("weights_from_host")
        for v, h in self._lowerer.variables.items():
            data = np.asarray(v._data).astype(v.dtype.as_numpy(), copy=False)
            self._engine.write_tensor(h.write, self._replica_rows(v, data))
        self._host_stale = False

    def weights_to_host(self) -> None:
        """Read every variable from the device into its host copy."""
        self._require_attached("weights_to_host")
        for v, h in self._lowerer.variables.items():
            rows = self._engine.read_tensor(h.read)
            if self._ir.replication_factor == 1:
                rows = rows.reshape(1, *v.shape)
            self._store_host(v, rows)
        self._host_stale = False

    def _store_host(self, v: Variable, rows: np.ndarray) -> None:
        rg = v.replica_grouping
        if rg.num_groups == 1:
            value = rows[0]
        else:
            first = [rg.assignment.index(g) for g in range(rg.num_groups)]
            value = rows[first]
        if isinstance(v._data, np.memmap):
            v._data[...] = value
            v._data.flush()
        else:
            v._data = np.array(value)

    def get_tensor_data(self, t: Tensor) -> np.ndarray:
        """A variable's or constant's value (syncing from the device if it ran since)."""
        return self.get_tensors_data([t])[t]

    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, np.ndarray]:
        tensors = list(tensors)
        for t in tensors:
            if not isinstance(t, (Variable, Constant)):
                raise TypeError(f"get_tensor_data: {t!r} is not a Variable or Constant")
        if self._attached and self._host_stale:
            self.weights_to_host()
        return {t: self._host_value(t) for t in tensors}

    def _host_value(self, t: Tensor) -> np.ndarray:
        if isinstance(t, Constant):
            return np.array(t._data)
        v: Variable = t  # type: ignore[assignment]
        data = np.array(v._data)
        rg = v.replica_grouping
        if v.retrieval_mode == "all_replicas" and rg.group_size > 1:
            return np.asarray(self._replica_rows(v, data)).copy()
        return data

    def write_variable_data(self, var: Variable, data: Any) -> None:
        self.write_variables_data({var: data})

    def write_variables_data(self, values: Mapping[Variable, Any]) -> None:
        for var, data in values.items():
            if not isinstance(var, Variable):
                raise TypeError(f"write_variable_data: {var!r} is not a Variable")
            if var.retrieval_mode == "all_replicas" and var.replica_grouping.group_size > 1:
                raise NotImplementedError(
                    "write_variable_data: 'all_replicas' variables with "
                    "groups of more than one replica"
                )
            arr = np.asarray(data)
            if arr.dtype != var.dtype.as_numpy() and not np.isscalar(data):
                raise TypeError(
                    f"write_variable_data: {var.id!r} is {var.dtype}, got data of type {arr.dtype}"
                )
            arr = arr.astype(var.dtype.as_numpy())
            if arr.shape != var.shape_on_host:
                raise ValueError(
                    f"write_variable_data: {var.id!r} needs shape "
                    f"{var.shape_on_host}, got {arr.shape}"
                )
        for var, data in values.items():
            self._store_host(
                var, self._replica_rows(var, np.asarray(data).astype(var.dtype.as_numpy()))
            )
        if self._attached:
            if self._host_stale:  # keep the device's other weights: read them first
                self.weights_to_host()
                for var, data in values.items():
                    self._store_host(
                        var, self._replica_rows(var, np.asarray(data).astype(var.dtype.as_numpy()))
                    )
            self.weights_from_host()

    # ---- running ----
    def _lead(self) -> tuple[int, ...]:
        nht, R = self._ir.num_host_transfers, self._ir.replication_factor
        return tuple(d for d in (nht, R) if d > 1)

    def expected_inputs(self) -> set[HostToDeviceStream]:
        return set(self._lowerer.h2d)

    def create_host_outputs(self) -> dict[DeviceToHostStream, np.ndarray]:
        return {
            s: np.zeros(self._lead() + s.shape, dtype=s.dtype.as_numpy()) for s in self._lowerer.d2h
        }

    def _check_inputs(self, inputs: Mapping[Any, Any], downcast: bool) -> dict[Any, np.ndarray]:
        given, wanted = set(inputs), set(self._lowerer.h2d)
        if given != wanted:
            extra = sorted(s.tensor_id for s in given - wanted)
            missing = sorted(s.tensor_id for s in wanted - given)
            raise ValueError(
                f"Session.run: unexpected input streams {extra}, missing input streams {missing}"
            )
        out = {}
        for s, value in inputs.items():
            arr = to_numpy(value, s.dtype if not downcast else None, downcast)
            arr = np.ascontiguousarray(arr, dtype=s.dtype.as_numpy())
            want = self._lead() + s.shape
            squeezed = tuple(d for d in arr.shape if d != 1)
            if arr.shape != want and squeezed != tuple(d for d in want if d != 1):
                raise ValueError(
                    f"Session.run: input for stream {s.tensor_id!r} has shape "
                    f"{arr.shape}; expected {want}"
                )
            out[s] = arr.reshape(want)
        return out

    def run(
        self, inputs: Mapping[Any, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[DeviceToHostStream, np.ndarray]:
        outputs = self.create_host_outputs()
        self.run_with_outputs(inputs, outputs, downcast_inputs)
        return outputs

    def run_with_outputs(
        self,
        inputs: Mapping[Any, Any] | None,
        outputs: Mapping[DeviceToHostStream, np.ndarray],
        downcast_inputs: bool = True,
    ) -> None:
        self._require_attached("run")
        arrays = self._check_inputs(inputs or {}, downcast_inputs)
        nht, R = self._ir.num_host_transfers, self._ir.replication_factor
        for s, arr in arrays.items():
            full = arr.reshape(nht, R, -1)
            host = full[:, 0].reshape(-1) if R == 1 else full.transpose(1, 0, 2).reshape(R, -1)
            self._engine.connect_stream(s.tensor_id, np.ascontiguousarray(host))
        buffers = {}
        for s in self._lowerer.d2h:
            if s not in outputs:
                raise ValueError(f"run_with_outputs: no output array for stream {s.tensor_id!r}")
            n = max(1, math.prod(s.shape))
            buf = np.zeros((R, nht * n) if R > 1 else (nht * n,), dtype=s.dtype.as_numpy())
            buffers[s] = buf
            self._engine.connect_stream(s.tensor_id, buf)
        self._engine.run(0)
        self._host_stale = True
        for s, buf in buffers.items():
            n = max(1, math.prod(s.shape))
            arr = buf.reshape(R, nht, n).transpose(1, 0, 2)
            outputs[s][...] = arr.reshape(self._lead() + s.shape)
