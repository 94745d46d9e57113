"""Gradient rules: one per op type, in files that mirror ``popxl/ops``
(``grads/elementwise.py`` for ``ops/elementwise.py``, ...). Registration (``@grad``,
``not_differentiable``) attaches each to its op's definition (``OpDefinition.grad``); the
registration and the protocol rules follow are in :mod:`.base`."""

from tremula.popxl.transforms.grads import (  # noqa: F401  (register the rules)
    call,
    collectives,
    control,
    conv,
    debug,
    elementwise,
    gather,
    misc,
    nn,
    random,
    reduce,
    resize,
    rnn,
    roi_align,
    shape,
    sparse,
    tensor_ops,
    var_updates,
)
from tremula.popxl.transforms.grads.base import (
    GRADS,
    GradContext,
    GradRule,
    OutputGrads,
    grad,
    not_differentiable,
    sum_to,
)

__all__ = [
    "GRADS",
    "GradContext",
    "GradRule",
    "OutputGrads",
    "grad",
    "not_differentiable",
    "sum_to",
]
