"""``popxl``: an alias of :mod:`tremula.popxl`, so existing PopXL programs run unmodified.

``popxl.X`` and ``popxl.X.Y`` are the modules ``tremula.popxl.X`` and ``tremula.popxl.X.Y``
(one module object under two names, so ``isinstance`` checks and module state agree).
"""

from __future__ import annotations

from tremula.alias import install

install("popxl", "tremula.popxl")

from tremula.popxl import *  # noqa: E402, F403
from tremula.popxl import (  # noqa: E402, F401
    __all__,
    __version__,
    replica_sharded_buffer,
)
