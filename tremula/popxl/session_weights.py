"""The weights of a ``Session``: moving variables between their host copies and the
device (``weights_from_host`` / ``weights_to_host``), and reading and writing them
(``get_tensor_data``, ``write_variable_data``), as PopXL's ``Session`` does.

Device variables have a Poplar tensor (with host write/read handles); remote variables
live in a remote-buffer entry, replica-sharded ones as one shard per replica (what
``replica_sharded_variable`` loads in the weights-from-host fragment, engine program 1, and
stores back in the weights-to-host fragment, program 2, is the program's). Host copies hold
``shape_on_host``; ``replica_grouping.py`` maps them to one row per replica and back.
Weight transfers log PopART's Devicex lines at DEBUG (``popart.getLogger("devicex")``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np

from tremula import poplar
from tremula.engine.engine import locked
from tremula.errors import StreamError
from tremula.popxl._ir.core.log import LOG
from tremula.popxl.ir import Ir
from tremula.popxl.replica_grouping import group_rows, replica_rows, shard_rows, unshard_rows
from tremula.popxl.tensor import Constant, Tensor, Variable

#: PopART's device logger: the weight transfers log there as PopART's Devicex does
_DEVICEX = LOG.getChild("devicex")


class SessionWeights:
    """The weight methods of :class:`~tremula.popxl.session.Session` (a base class: the
    session sets these attributes when it compiles)."""

    _ir: Ir
    _engine: poplar.Engine
    _lowerer: Any  # the lowering's Lowerer (only session.py imports the lowering)
    _R: int
    _L: int
    _local: slice
    _fragments: list[bool]
    _attached: bool
    _host_stale: bool
    _d2h_noted: set[Variable]
    _replica_values: dict[Variable, np.ndarray]

    _device: poplar.Device

    @property
    def is_attached(self) -> bool:
        """Whether the session is attached: it attached its device (``with session:``) and
        the device is still attached (PopXL reads the device's ``isAttached``, so
        ``session.device.detach()`` detaches the session too)."""
        return self._attached and self._device.attached

    def _require_attached(self, what: str) -> None:
        if not self.is_attached:
            raise ValueError(
                f"Session.{what}: the session is not attached to a device; use `with session:`"
            )

    def _device_variables(self) -> list[tuple[Variable, Any]]:
        return [(v, h) for v, h in self._lowerer.variables.items() if v.remote is None]

    def _remote_variables(self) -> list[Variable]:
        return [v for v in self._ir.main_graph.variables if v.remote is not None]

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
        remote-buffer entries, replica-sharded ones as shards), then run the
        weights-from-host fragment."""
        self._require_attached("weights_from_host")
        self._collective("weights_from_host")
        _DEVICEX.debug("Writing weights from host, ")
        local = self._local
        for v, h in self._device_variables():
            self._engine.write_tensor(h.write, self._rows(v)[local])
        for v in self._remote_variables():
            where = self._remote_entry(v)
            if where is not None:
                same = v.replica_grouping.num_groups == 1 and v.shard_over is None
                self._write_entry(where, self._rows(v), same)
        if self._fragments[0]:
            self._engine.run(1)  # the ops made in ExecutionContext.WeightsFromHostFragment
        self._host_stale = False
        self._replica_values.clear()  # every replica has its group's host row again
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
        """Run the weights-to-host fragment, then read every variable from the device into
        its host copy (a replica-sharded variable from its shards)."""
        self._require_attached("weights_to_host")
        self._collective("weights_to_host")
        _DEVICEX.debug("Writing weights to host")
        L = self._L
        if self._fragments[1]:
            self._engine.run(2)  # the ops made in ExecutionContext.WeightsToHostFragment
        for v, h in self._device_variables():
            rows = self._gather(self._engine.read_tensor(h.read).reshape(L, *v.shape))
            self._note_d2h_buffer(v)
            self._keep_replica_values(v, rows)
            v.store_host(group_rows(v.replica_grouping, rows, v.shape))
        for v in self._remote_variables():
            where = self._remote_entry(v)
            if where is None:
                continue
            rows = np.stack(
                [self._engine.copy_from_remote_buffer(where[0], where[1], r) for r in range(L)]
            )
            if v.shard_over is None:  # entries are flat: the variable may have any shape
                rows = rows.reshape(L, *v.shape)
            rows = self._gather(rows)
            self._keep_replica_values(v, rows)
            v.store_host(self._from_rows(v, rows))
        self._host_stale = False
        _DEVICEX.debug("Writing weights to host complete.")

    @staticmethod
    def _per_replica(v: Variable) -> bool:
        """Whether ``get_tensor_data`` returns ``v`` per replica though its groups have
        several: ``"all_replicas"`` retrieval of an unsharded variable (a sharded one's
        members hold parts of one value, which PopART gathers into the group's slot)."""
        return (
            v.retrieval_mode == "all_replicas"
            and v.replica_grouping.group_size > 1
            and v.shard_over is None
        )

    def _keep_replica_values(self, v: Variable, rows: np.ndarray) -> None:
        """Keep the ``[R, ...]`` rows just read of a per-replica variable: members of a
        group that the program updated differently each read back their own value (PopART's
        weightsToHost fills one slot per replica, in replica order)."""
        if self._per_replica(v):
            self._replica_values[v] = np.array(rows)

    def _note_d2h_buffer(self, v: Variable) -> None:
        """Log, the first time a variable is read back, that its host copy is written in
        place (PopART's devicex: "Reusing TensorData for d2hWeightBuffer of tensor <id>"
        for a variable that returns one value, which PopART reads straight into the
        variable's own data; a ``np.memmap`` is thus written to directly)."""
        if v in self._d2h_noted:
            return
        self._d2h_noted.add(v)
        rg = v.replica_grouping  # one value: one group, not returned per replica
        if rg.num_groups == 1 and (v.retrieval_mode != "all_replicas" or self._R == 1):
            _DEVICEX.debug("Reusing TensorData for d2hWeightBuffer of tensor %s", v.id)

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

    def get_tensor_data(self, tensor: Tensor) -> np.ndarray:
        """A variable's or constant's value (syncing from the device if it ran since).
        ``tensor`` is PopXL's parameter name (~70 %).

        Raises:
            TypeError: ``tensor`` is not a Variable or Constant.
        """
        return self.get_tensors_data([tensor])[tensor]

    @locked
    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, np.ndarray]:
        """The values of variables and constants: ``shape_on_host`` for ``"one_per_group"``
        variables (the first replica of each group), ``(R, *shape)`` for ``"all_replicas"``
        ones of groups of several replicas (each replica's own value as last read from the
        device; its group's host row before). Syncs from the device once if it ran since and
        a variable is asked for.

        Raises:
            TypeError: a tensor is not a Variable or Constant.
        """
        tensors = list(tensors)
        for t in tensors:
            self._check_variable(t, "get_tensor_data", (Variable, Constant))
        variables = any(isinstance(t, Variable) for t in tensors)  # (constants never change)
        if variables and self.is_attached and self._host_stale:
            self.weights_to_host()
        return {t: self._host_value(t) for t in tensors}

    def _check_variable(self, t: Any, what: str, kinds: tuple[type, ...]) -> None:
        """``t`` is one of ``kinds`` (TypeError, in PopXL's words) and a tensor of this
        session's Ir (ValueError: another Ir's tensor has its own host copy, which this
        session neither reads nor writes)."""
        names = " or ".join(k.__name__ for k in reversed(kinds))
        if not isinstance(t, kinds):  # PopXL's words: "Tensor <id> is not of type ..."
            tid = getattr(t, "id", None) or getattr(t, "tensor_id", None) or repr(t)
            raise TypeError(f"Tensor {tid} is not of type {names}. ({what}: got {t!r})")
        tensor = cast(Tensor, t)
        if tensor.ir is not self._ir:
            raise ValueError(
                f"{what}: tensor {tensor.id!r} belongs to {tensor.ir!r}, not to this "
                f"session's {self._ir!r}: pass the session of the Ir that made it"
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
            read = self._replica_values.get(v)  # each replica's own, once read back
            return replica_rows(rg, np.array(v.host_data), v.shape) if read is None else read.copy()
        if isinstance(v.host_data, np.memmap):
            return v.host_data
        return np.array(v.host_data)

    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Set a variable's value (``shape_on_host``); see :meth:`write_variables_data`.
        ``tensor`` is PopXL's parameter name (~70 %)."""
        self.write_variables_data({tensor: data})

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
        if self.is_attached and self._host_stale:
            self.weights_to_host()  # keep the device values of the other weights
        for var, arr in checked.items():
            var.store_host(arr)
        if self.is_attached:
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
