"""Errors of the gcl library: bad replica groupings and bad collective calls."""

from __future__ import annotations

from tremula.errors import GraphError, TremulaError


class GroupingError(TremulaError, ValueError):
    """A replica grouping or a ``CommGroup`` is invalid for the replicas it is used with
    (a stride or group size that does not divide the replicas, unequal groups, ...)."""


class CollectiveError(GraphError):
    """A collective got arguments it cannot honour (operator and type, shapes, groups)."""
