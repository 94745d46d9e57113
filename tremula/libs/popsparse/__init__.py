"""popsparse: PopLibs' sparse library, the dynamic sparse fully-connected layer.

``from tremula.libs.popsparse import COOMatrix, CSRMatrix, CSCMatrix, dynamic``. The host
formats (:mod:`formats`) follow PopSparse's semantics; :mod:`dynamic` holds the parameters,
options, planner, partitioner and the device functions (weights, passes, matmul). See
``OVERVIEW.md`` for the plan, the bucket layout and the device program.
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
