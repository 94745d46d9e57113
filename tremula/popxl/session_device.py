"""What a ``Session`` compiles for: the device (from ``device_desc``, sized for the Ir's
IPUs and replicas) and the parts of the program its ops may be made in."""

from __future__ import annotations

import math
import sys

from tremula import poplar
from tremula.popxl.ir import Ir
from tremula.popxl.tensorlocation import ExecutionContext

_HW_WARNED = [False]  # the ipu_hw note is printed once a process


def ipus_per_replica(ir: Ir) -> int:
    """How many virtual IPUs a replica of ``ir`` uses (``popxl.ipu(n)``, ``ipu_copy``)."""
    used = [op.ipu for g in ir.graphs for op in g.ops if op.ipu is not None]
    used += [t._ipu for g in ir.graphs for t in g.tensors if t._ipu is not None]
    return 1 + max(used, default=0)


def _given(device: poplar.Device, ir: Ir) -> poplar.Device:
    """A device made by the caller (``popart.DeviceInfo``, or a ``poplar.Device``): it must
    have an IPU for each replica's IPUs (each of this instance's replicas, in a PopRun job:
    the device of the whole job's graph is then that of all instances together)."""
    L, R = ir.instance_replication_factor, ir.replication_factor
    need = ipus_per_replica(ir) * L
    have = device.target.num_ipus
    if need > 1 and (device.target.is_cpu or have % need):
        raise ValueError(
            f"Session: the device has {have} IPU(s); this Ir needs a multiple of {need} "
            f"({ipus_per_replica(ir)} per replica x replication_factor {L})"
        )
    if L < R and not device.target.is_cpu:
        return poplar.Device(device.target.with_overrides(num_ipus=have * R // L))
    return device


def online_device(device: poplar.Device) -> poplar.Device | None:
    """The device a session compiled for ``device`` runs on when entered: for an offline
    device (a ``popart.DeviceInfo`` of connection type ``Never``, which compiles but cannot
    attach), an IPU device of the same target, attached on demand (PopXL acquires hardware
    then); None for any other device (it runs on itself)."""
    from tremula.popxl._ir.core.devices import DeviceInfo
    from tremula.popxl._ir.core.enums import DeviceConnectionType, DeviceType

    if not isinstance(device, DeviceInfo) or device.connectionType != DeviceConnectionType.Never:
        return None
    return DeviceInfo(device.target, DeviceType.Ipu, device.id, DeviceConnectionType.OnDemand)


def ipu_count(ir: Ir) -> int:
    """The IPUs of the device a Session makes for ``ir``: PopXL's 2 ** ceil(log2(IPUs per
    replica x replicas)); a count the replicas do not divide (3 replicas in 4 IPUs) becomes
    exactly IPUs per replica x replicas."""
    per, R = ipus_per_replica(ir), ir.replication_factor
    ipus = 2 ** math.ceil(math.log2(per * R))
    return ipus if ipus % R == 0 else per * R


def device_for(desc: str | poplar.Device, ir: Ir) -> poplar.Device:
    """The device a Session of ``ir`` compiles for, from ``device_desc``: for a string, the
    ``popart.DeviceInfo`` PopXL's ``_to_device_info`` makes (type ``Cpu``, ``IpuModel``, or
    ``Ipu`` for ``"ipu_hw"``, an IPU Model too) with :func:`ipu_count` IPUs.

    Raises:
        ValueError: an unknown device type (PopXL's "Incorrect device type provided"), or
            ``"cpu"`` for an Ir that needs more than one IPU.
    """
    from tremula.popxl.utils import _to_device_info

    if isinstance(desc, poplar.Device):
        return _given(desc, ir)
    if desc == "cpu":  # one IPU per process (an instance of a PopRun job may have one)
        ipus, R = ipus_per_replica(ir), ir.instance_replication_factor
        if ipus * R > 1:
            raise ValueError(
                f"Session: the 'cpu' device has one IPU; this Ir needs {ipus * R} "
                f"({ipus} per replica (popxl.ipu / ipu_copy) x replication_factor {R}); "
                f"use 'ipu_model'"
            )
        return _to_device_info(desc)
    device = _to_device_info(desc, ipu_count(ir))  # (refuses another device type)
    if desc == "ipu_hw" and not _HW_WARNED[0]:
        print("Tremula: 'ipu_hw' runs on the IPU Model (there is no hardware)", file=sys.stderr)
        _HW_WARNED[0] = True
    return device


#: where ops may be made: the main graph's three programs (lowering's FRAGMENTS), subgraphs
_CONTEXTS = (
    ExecutionContext.Normal,
    ExecutionContext.WeightsFromHostFragment,
    ExecutionContext.WeightsToHostFragment,
)


def check_execution_contexts(ir: Ir) -> None:
    """Ops run in the main program, in the weights-from-host fragment (run after weights
    are written) or in the weights-to-host fragment (run before they are read); subgraph
    ops where they are called. Ops made for another part of PopART's program are refused
    rather than run at the wrong time."""
    for g in ir.graphs:
        allowed = _CONTEXTS if g is ir.main_graph else (*_CONTEXTS[:1], ExecutionContext.Subgraph)
        for op in g.ops:
            if op.execution_context not in allowed:
                raise NotImplementedError(
                    f"Session: {op!r} in {g.name!r} was created in {op.execution_context!r}; "
                    f"Tremula runs ops of {', '.join(c.name for c in allowed)} there"
                )


def check_replica_groupings(ir: Ir) -> None:
    """Every replica grouping the Ir uses (of its variables, of its collectives) is of the
    Ir's replicas: a grouping made before ``ir.replication_factor`` changed is refused,
    naming the variable or op, instead of failing inside the lowering.

    Raises:
        ValueError: a grouping of another number of replicas.
    """
    from tremula.popxl.replica_grouping import ReplicaGrouping

    for v in ir.main_graph.variables:
        v.replica_grouping._for_ir(ir, f"Session: variable {v.id!r}")
    for g in ir.graphs:
        for op in g.ops:
            for value in op.attrs.values():
                if isinstance(value, ReplicaGrouping):
                    value._for_ir(ir, f"Session: {op!r} in {g.name!r}")
