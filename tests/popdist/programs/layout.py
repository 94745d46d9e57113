"""Prints what PopDist tells this instance, then joins a collective and an all-gather of the
instance indices over the MPI world (every instance must see every other)."""

from mpi4py import MPI

import popdist

popdist.init()
assert popdist.isBackendInitialized()
values = [
    popdist.isPopdistEnvSet(),
    popdist.getNumTotalReplicas(),
    popdist.getNumLocalReplicas(),
    popdist.getReplicaIndexOffset(),
    popdist.getNumInstances(),
    popdist.getInstanceIndex(),
    popdist.getLocalInstanceIndex(),
    popdist.getNumIpusPerReplica(),
    popdist.checkNumIpusPerReplica(2),
    popdist.checkNumIpusPerReplica(3),
    popdist.getDeviceId(),
]
seen = MPI.COMM_WORLD.allgather(popdist.getInstanceIndex())
only = popdist.execute_on_instances({1}, lambda x: x * 10, popdist.getInstanceIndex() + 1)
print("layout", *values, "world", *seen, "only", only, flush=True)
