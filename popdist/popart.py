"""``popdist.popart``: PopDist's helpers for PopART sessions (and PopXL's ``Ir(replication=
"popdist")``): the replication options and the device of this instance.

It lives in the alias package, above PopART and PopDist both, because it joins the two.
"""

from __future__ import annotations

from typing import Any

from tremula.popdist import env


def configureSessionOptions(opts: Any) -> None:
    """Set the five replication options of a ``popart.SessionOptions`` from the PopRun
    layout: ``enableReplicatedGraphs`` / ``replicatedGraphCount`` (this instance's
    replicas), ``enableDistributedReplicatedGraphs`` (several instances),
    ``globalReplicaOffset`` and ``globalReplicationFactor``."""
    for name, value in env.layout().session_options().items():
        setattr(opts, name, value)


def getDevice(ipusPerReplica: int = 0, connectionType: Any = None) -> Any:
    """This instance's device: an IPU Model of ``2 ** ceil(log2(ipus x L))`` IPUs (``ipus``
    per replica, poprun's when 0; ``L`` local replicas), from ``popart.DeviceManager``.

    Raises:
        ValueError: ``ipusPerReplica`` differs from poprun's ``--ipus-per-replica``.
    """
    lay = env.layout()
    ipus = int(ipusPerReplica) or lay.ipus_per_replica
    if env.is_set() and ipus != lay.ipus_per_replica:
        raise ValueError(
            f"popdist.popart.getDevice: ipusPerReplica={ipus} but poprun set "
            f"--ipus-per-replica {lay.ipus_per_replica}"
        )
    from popart import DeviceManager

    count = 1 << max(0, (ipus * lay.local_replicas - 1).bit_length())
    kwargs = {} if connectionType is None else {"connectionType": connectionType}
    return DeviceManager().acquireAvailableDevice(count, **kwargs)
