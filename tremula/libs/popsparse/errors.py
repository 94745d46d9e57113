"""Errors of the popsparse library.

Every class is a ``ValueError`` (as PopLibs' ``poputil::poplibs_error`` is caught by code
written for the SDK) and a :class:`tremula.errors.TremulaError`. Messages start with the
text PopLibs uses (``"COO Validation failed: ..."``, ``"Overflow in buckets"`` ...) and then
name the offending value, where it is and what was expected.
"""

from __future__ import annotations

from tremula.errors import TremulaError


class PopsparseError(TremulaError, ValueError):
    """Bad sparsity parameters, options or plan constraints."""


class SparseFormatError(PopsparseError):
    """A COO / CSR / CSC matrix fails validation, or a conversion between formats or block
    sizes cannot be done."""


class PlanningError(PopsparseError):
    """No plan can honour the parameters, type or plan constraints."""


class BucketOverflowError(PopsparseError):
    """A sparsity pattern does not fit in the buckets the plan sized ("Overflow in buckets"):
    raise ``metaInfoBucketOversizeProportion`` or plan for a higher density."""


class MetaInfoError(PopsparseError):
    """Meta-info read back is corrupt or does not belong to this partitioner's plan
    ("Invalid meta-info"), or a value does not fit its uint16 word ("Metainfo bucket element
    exceeds type bound")."""
