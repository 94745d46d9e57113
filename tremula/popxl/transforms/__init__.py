"""PopXL transforms: ``autodiff`` (grad graphs from the per-op gradient rules in
``grads.py``) and the numerically transparent ``merge_exchange``, ``io_tile_exchange`` and
``decompose_sum``."""

from tremula.popxl.transforms.autodiff import (
    ExpectedConnection,
    ExpectedConnectionType,
    GradGraphInfo,
    autodiff,
)
from tremula.popxl.transforms.decompose_sum import decompose_sum
from tremula.popxl.transforms.merge_exchange import io_tile_exchange, merge_exchange

__all__ = [
    "ExpectedConnection",
    "ExpectedConnectionType",
    "GradGraphInfo",
    "autodiff",
    "decompose_sum",
    "io_tile_exchange",
    "merge_exchange",
]
