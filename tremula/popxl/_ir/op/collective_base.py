"""PopART's ``CollectivesBaseOp`` with its getters: the family base of the collectives'
binding classes (``op.collectives``, made in ``classes.py``)."""

from __future__ import annotations

from typing import Any

from tremula.popxl._ir.op.base import Op


class CollectivesBaseOp(Op):
    __module__ = "popart._internal.ir.op.collectives"  # where the bindings put it

    """A collective op (PopART's ``CollectivesBaseOp``): over a replica grouping, or, for
    the cross-IPU ``AllReduce``, over the IPUs of one replica."""

    def getReplicaGrouping(self) -> Any:
        """The grouping of replicas the op works within, as the bindings' C++-style
        ``ReplicaGrouping`` (PopXL's ``group._pb_replica_grouping``).

        Raises:
            PopartException: an op over IPUs, not replicas (``AllReduce``).
        """
        return self._group()._pb_replica_grouping

    def getGCLCommGroup(self) -> Any:
        """The grouping as PopART's ``CommGroup`` (``_ir.CommGroup``)."""
        from tremula.popxl._ir.core.grouping import CommGroup

        return CommGroup(self.getReplicaGrouping())

    def getCollectiveOp(self) -> Any:
        """The reduction (``_ir.CollectiveOperator``; ``Local`` for the slice of a
        ``replica_sharded_slice``).

        Raises:
            PopartException: an op without one (an all-gather).
        """
        from tremula.errors import PopartException
        from tremula.popxl.ops.collectives.collectives import CollectiveOperator

        op = self.attrs.get("op")
        if op is None:
            raise PopartException(f"{self.debugName()} has no collective operator")
        if isinstance(op, str):  # PopXL's name; "mul" is Mean, as PopXL maps it
            op = CollectiveOperator("mean" if op == "mul" else op)
        return op

    def _group(self) -> Any:
        from tremula.errors import PopartException

        group = self.attrs.get("group")
        if group is None:
            raise PopartException(f"{self.debugName()} works over IPUs, not a replica grouping")
        return group
