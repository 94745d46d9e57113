"""GCL on the engine: collectives across the replicas of a replicated graph, over replica
groups, and the replica-grouping representation shared by PopXL and PopART.

``from tremula.libs import gcl``; then, with a ``prog = poplar.Sequence()``::

    out = gcl.all_reduce(graph, t, gcl.CollectiveOperator.ADD, prog, group=None)

See ``OVERVIEW.md``.

Every name is imported on first use (:mod:`tremula.lazy`): PopXL's replica groupings load
``grouping`` without the collectives and the PopOps they are built from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tremula.libs.gcl.collectives import (
        all_gather,
        all_reduce,
        all_reduce_in_place,
        all_to_all,
        broadcast,
        reduce_scatter,
        resolve_group,
    )
    from tremula.libs.gcl.errors import CollectiveError, GroupingError
    from tremula.libs.gcl.grouping import CommGroup, CommGroupType, ReplicaGrouping
    from tremula.libs.gcl.operators import CollectiveOperator
    from tremula.libs.gcl.within_replica import all_reduce_within_replica
else:
    from tremula.lazy import attach

    __getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "CollectiveError",
    "CollectiveOperator",
    "CommGroup",
    "CommGroupType",
    "GroupingError",
    "ReplicaGrouping",
    "all_gather",
    "all_reduce",
    "all_reduce_in_place",
    "all_reduce_within_replica",
    "all_to_all",
    "broadcast",
    "reduce_scatter",
    "resolve_group",
]
