"""popsparse: PopLibs' sparse library, the dynamic sparse fully-connected layer (host side).

``from tremula.libs.popsparse import COOMatrix, CSRMatrix, CSCMatrix, dynamic``. The host
formats (:mod:`formats`) follow PopSparse's semantics; :mod:`dynamic` holds the parameters,
options, planner and partitioner. See ``OVERVIEW.md`` for the plan and the bucket layout
the device program reads.
"""

from tremula.libs.popsparse import dynamic
from tremula.libs.popsparse.errors import (
    BucketOverflowError,
    MetaInfoError,
    PlanningError,
    PopsparseError,
    SparseFormatError,
)
from tremula.libs.popsparse.formats import COOMatrix, CSCMatrix, CSRMatrix

__all__ = [
    "BucketOverflowError",
    "COOMatrix",
    "CSCMatrix",
    "CSRMatrix",
    "MetaInfoError",
    "PlanningError",
    "PopsparseError",
    "SparseFormatError",
    "dynamic",
]
