"""PopXL IR -> Poplar graph and programs, one rule per op, in files mirroring
``tremula/popxl/ops``. The custom ops' rules (``custom_ops``) register on first use: the
driver loads them when it meets an op type with no rule yet."""

from tremula.lowering import (  # noqa: F401  (register rules)
    call,
    collectives,
    control,
    conv,
    debug,
    elementwise,
    fp8,
    gather,
    io,
    misc,
    nn,
    random,
    reduce,
    resize,
    rnn,
    roi_align,
    scatter,
    shape,
    sparse,
    tensor_ops,
    var_updates,
)
from tremula.lowering.driver import LOWERING_RULES, Lowerer

__all__ = ["LOWERING_RULES", "Lowerer"]
