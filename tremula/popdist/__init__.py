"""PopDist: what an instance of a PopRun job knows about the job (``import popdist``).

``poprun`` (:mod:`tremula.popdist.poprun`) starts the instances with ``mpirun`` and tells each
its place through ``POPDIST_*`` variables; these functions read them
(as PopDist reads them). Without a launcher a program is one instance
with one replica. The MPI backend (:mod:`tremula.popdist.backend`) and the replica runtimes
the engine runs on (:mod:`tremula.popdist.replicas`) live beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tremula.popdist import backend, env

__all__ = [
    "InstanceReplicas",
    "LocalReplicas",
    "broadcast",
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "finalizeBackend",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "initializeBackend",
    "isBackendInitialized",
    "isPopdistEnvSet",
    "runtime_replicas",
]


def isPopdistEnvSet() -> bool:
    """True when the program was launched by poprun."""
    return env.is_set()


def getNumTotalReplicas() -> int:
    """The job's global replica count ``R`` (1 without poprun)."""
    return env.layout().total_replicas


def getNumLocalReplicas() -> int:
    """This instance's replica count ``L`` (1 without poprun)."""
    return env.layout().local_replicas


def getReplicaIndexOffset() -> int:
    """The global index of this instance's first replica (0 without poprun)."""
    return env.layout().replica_offset


def getNumInstances() -> int:
    """The job's instance count ``R / L`` (1 without poprun)."""
    return env.layout().num_instances


def getInstanceIndex() -> int:
    """This instance's index in ``[0, getNumInstances())`` (0 without poprun)."""
    return env.layout().instance_index


def getLocalInstanceIndex() -> int:
    """This instance's index among the instances on its host (0 without poprun)."""
    return env.layout().local_instance_index


def getNumIpusPerReplica() -> int:
    """IPUs per replica (``poprun --ipus-per-replica``, 1 without poprun)."""
    return env.layout().ipus_per_replica


def checkNumIpusPerReplica(ipusPerReplica: int) -> bool:
    """False when poprun set a different number of IPUs per replica."""
    return not env.is_set() or env.layout().ipus_per_replica == int(ipusPerReplica)


def getDeviceId(ipusPerReplica: int = 0) -> int:
    """The id of this instance's device: one IPU Model device per instance, numbered by
    the instance's index on its host (``ipusPerReplica`` is checked, 0 means poprun's).

    Raises:
        ValueError: ``ipusPerReplica`` differs from poprun's ``--ipus-per-replica``.
    """
    if ipusPerReplica and not checkNumIpusPerReplica(ipusPerReplica):
        raise ValueError(
            f"getDeviceId: ipusPerReplica={ipusPerReplica} but poprun set "
            f"--ipus-per-replica {getNumIpusPerReplica()}"
        )
    return getLocalInstanceIndex()


def init() -> None:
    """Initialise the MPI backend (once per process; later calls do nothing). PopXL's
    ``Session`` calls it when the Ir is distributed."""
    backend.initialize()


def initializeBackend() -> None:
    backend.initialize()


def finalizeBackend() -> None:
    backend.finalize()


def isBackendInitialized() -> bool:
    return backend.is_initialized()


def execute_on_instances(
    instances: Iterable[int], func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Run ``func`` on the listed instances only (e.g. ``{0}`` to save a checkpoint once);
    returns its result there and None elsewhere."""
    return backend.execute_on_instances(instances, func, *args, **kwargs)


def broadcast(arrays: list[Any], root: int = 0) -> list[Any]:
    """Instance ``root``'s NumPy ``arrays`` on every instance (Tremula's host-side form of
    PopDist's C++ ``collectives::broadcast``; PopART's ``broadcastWeights`` uses it). A
    collective call: every instance passes arrays of the same shapes and dtypes and the
    same ``root``; without poprun it returns ``arrays``.

    Raises:
        DistributedError: the instances disagree on the call or on ``root``.
    """
    return backend.broadcast(arrays, root, "broadcast")


#: names loaded on first use (the replica runtimes need NumPy): poprun starts without it
LAZY = ("InstanceReplicas", "LocalReplicas", "runtime_replicas")


def __getattr__(name: str) -> Any:
    if name in LAZY:
        from tremula.popdist import replicas

        return getattr(replicas, name)
    raise AttributeError(f"module 'popdist' has no attribute {name!r}")
