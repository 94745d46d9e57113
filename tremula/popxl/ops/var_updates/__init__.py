"""Variable updates (``popxl.ops.var_updates``): accumulators, optimiser update terms and
weight updates, in place on their first tensor (see ``accumulate.py``,
``adam_updater.py``, ``adam_var_update.py``; shared rules in ``utils.py``)."""

from tremula.popxl.context import make_atomic
from tremula.popxl.ops.var_updates.accumulate import (
    accumulate_,
    accumulate_mean_,
    accumulate_moving_average_,
    accumulate_moving_average_square_,
    accumulate_square_,
    accumulator_scale_,
    accumulator_zero_,
    copy_var_update_,
    sparse_accumulate_,
)
from tremula.popxl.ops.var_updates.adam_updater import adam_updater, adamax_updater, lamb_updater
from tremula.popxl.ops.var_updates.adam_var_update import adam_var_update

__all__ = [
    "accumulate_",
    "accumulate_mean_",
    "accumulate_moving_average_",
    "accumulate_moving_average_square_",
    "accumulate_square_",
    "accumulator_scale_",
    "accumulator_zero_",
    "adam_updater",
    "adam_var_update",
    "adamax_updater",
    "copy_var_update_",
    "lamb_updater",
    "sparse_accumulate_",
]

make_atomic(globals(), __all__)  # a refused call adds nothing (see popxl.ops)
