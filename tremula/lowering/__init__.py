"""PopXL IR -> Poplar graph and programs, one rule per op, in files mirroring
``tremula/popxl/ops``."""

from tremula.lowering import call, elementwise, io, tensor_ops  # noqa: F401  (register rules)
from tremula.lowering.context import RULES, Lowerer

__all__ = ["RULES", "Lowerer"]
