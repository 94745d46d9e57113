"""The layout of a PopRun job as its instances see it: the ``POPDIST_*`` environment.

``poprun`` exports, to every instance, the variables PopRun exports
(``POPDIST_NUM_TOTAL_REPLICAS`` ...): the global replica count, this instance's
replica count and first global replica, the IPUs per replica and the instance's index on its
host. Everything else follows from them: with ``L`` replicas per instance (uniform), instance
``i`` owns global replicas ``[i L, (i + 1) L)``, there are ``R / L`` instances, and this one
is ``offset / L``. Without these variables a program is one instance of one replica.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from tremula.errors import DistributedConfigError

TOTAL = "POPDIST_NUM_TOTAL_REPLICAS"
LOCAL = "POPDIST_NUM_LOCAL_REPLICAS"
OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
IPUS = "POPDIST_NUM_IPUS_PER_REPLICA"
UNIFORM = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
LOCAL_INSTANCE = "POPDIST_LOCAL_INSTANCE_INDEX"
#: seconds a collective device call waits for the other instances (``poprun
#: --collective-timeout``)
TIMEOUT = "POPDIST_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
#: Open MPI components for one host (shared memory, and TCP for --mpi-global-args hosts),
#: unless the environment names others (poprun exports them; the backend sets them before
#: its first MPI import): without them MPI_Init probes the fabric libraries (libfabric's
#: OFI, UCX) in every process, about 1 s here, in a 4-instance job and in one process alike
FAST_INIT = {
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,sm,tcp",
    "OMPI_MCA_mtl": "^ofi",
    "OMPI_MCA_osc": "^ucx",
}

#: variable -> value when unset (the layout of a program run without a launcher)
DEFAULTS = {TOTAL: 1, LOCAL: 1, OFFSET: 0, IPUS: 1, UNIFORM: 1, LOCAL_INSTANCE: 0}
#: the variables whose presence means "launched by poprun"
REQUIRED = (TOTAL, LOCAL, OFFSET)


class Layout(NamedTuple):
    """Replicas and instances of a job, from one instance's point of view (a named tuple,
    not a dataclass: poprun starts without ``dataclasses`` and the ``inspect`` it loads).

    Invariants (checked by :func:`layout`): ``local_replicas`` divides ``total_replicas``,
    ``replica_offset`` is a multiple of ``local_replicas`` below ``total_replicas``.
    """

    total_replicas: int = 1
    local_replicas: int = 1
    replica_offset: int = 0
    ipus_per_replica: int = 1
    local_instance_index: int = 0

    @property
    def num_instances(self) -> int:
        return self.total_replicas // self.local_replicas

    @property
    def instance_index(self) -> int:
        return self.replica_offset // self.local_replicas

    @property
    def local_replica_ids(self) -> range:
        """The global indices of this instance's replicas."""
        return range(self.replica_offset, self.replica_offset + self.local_replicas)

    def session_options(self) -> dict[str, int | bool]:
        """The five replication fields of PopART's ``SessionOptions`` for this layout (what
        ``popdist.popart.configureSessionOptions`` sets, and so what ``Ir("popdist")``
        has): replicated graphs when this instance drives several replicas, distributed
        ones when the job has several instances, this instance's count and offset, and the
        job's count."""
        return {
            "enableReplicatedGraphs": self.local_replicas > 1,
            "replicatedGraphCount": self.local_replicas,
            "enableDistributedReplicatedGraphs": self.num_instances > 1,
            "globalReplicaOffset": self.replica_offset,
            "globalReplicationFactor": self.total_replicas,
        }

    def environment(self) -> dict[str, str]:
        """The ``POPDIST_*`` variables that describe this layout (what poprun exports)."""
        return {
            TOTAL: str(self.total_replicas),
            IPUS: str(self.ipus_per_replica),
            LOCAL: str(self.local_replicas),
            UNIFORM: "1",
            OFFSET: str(self.replica_offset),
            LOCAL_INSTANCE: str(self.local_instance_index),
        }


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name)
    if raw is None:
        return DEFAULTS[name]
    try:
        return int(raw)
    except ValueError:
        raise DistributedConfigError(
            f"PopDist: {name}={raw!r} is not an integer (set by poprun; do not set it by hand)"
        ) from None


def is_set(environ: Mapping[str, str] | None = None) -> bool:
    """True when the program was launched by poprun (any of its replica variables is set)."""
    environ = os.environ if environ is None else environ
    return any(name in environ for name in REQUIRED)


def layout(environ: Mapping[str, str] | None = None) -> Layout:
    """This instance's :class:`Layout` from the environment (one replica, one instance when
    poprun did not launch the program).

    Raises:
        DistributedConfigError: some but not all of the replica variables are set, a value
            is not an integer, or the values contradict each other or the MPI world that
            mpirun reports (``OMPI_COMM_WORLD_SIZE`` / ``_RANK``).
    """
    environ = os.environ if environ is None else environ
    if not is_set(environ):
        return Layout()
    missing = [name for name in REQUIRED if name not in environ]
    if missing:
        present = {n: environ[n] for n in REQUIRED if n in environ}
        raise DistributedConfigError(
            f"PopDist: inconsistent environment: {present} is set but {missing} is not "
            f"(launch the program with poprun, which sets all of them)"
        )
    out = Layout(*(_int(environ, n) for n in (TOTAL, LOCAL, OFFSET, IPUS, LOCAL_INSTANCE)))
    _check(out, environ)
    return out


def _check(out: Layout, environ: Mapping[str, str]) -> None:
    R, L, offset = out.total_replicas, out.local_replicas, out.replica_offset
    problems = []
    if R < 1 or L < 1 or out.ipus_per_replica < 1:
        problems.append(f"{TOTAL}={R}, {LOCAL}={L} and {IPUS}={out.ipus_per_replica} must be >= 1")
    elif R % L:
        problems.append(f"{LOCAL}={L} does not divide {TOTAL}={R}")
    elif offset % L or not 0 <= offset < R:
        problems.append(
            f"{OFFSET}={offset} is not the first replica of an instance of {L} replicas "
            f"among {R} (a multiple of {L} below {R})"
        )
    elif environ.get(UNIFORM, "1") not in ("1", "yes", "true"):
        problems.append(f"{UNIFORM}={environ[UNIFORM]!r}: only uniform layouts are supported")
    else:
        size, rank = environ.get("OMPI_COMM_WORLD_SIZE"), environ.get("OMPI_COMM_WORLD_RANK")
        if size is not None and int(size) != out.num_instances:
            problems.append(
                f"{TOTAL}={R} / {LOCAL}={L} gives {out.num_instances} instance(s) but mpirun "
                f"started {size}"
            )
        elif rank is not None and int(rank) != out.instance_index:
            problems.append(
                f"{OFFSET}={offset} makes this instance {out.instance_index}, but it is MPI "
                f"rank {rank}"
            )
    if problems:
        raise DistributedConfigError(f"PopDist: inconsistent environment: {problems[0]}")


def collective_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a collective device call waits for the other instances before the job is
    aborted (``POPDIST_COLLECTIVE_TIMEOUT``, default 300)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(TIMEOUT)
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise DistributedConfigError(f"PopDist: {TIMEOUT}={raw!r} must be a positive number")
    return value
