"""``popxl``: an alias of :mod:`tremula.popxl`, so existing PopXL programs run unmodified.

``import popxl`` gives the module ``tremula.popxl`` itself, and ``popxl.X.Y`` is the module
``tremula.popxl.X.Y`` (one module object under two names, so ``isinstance`` checks, module
state and attributes agree; see :mod:`tremula.alias`).
"""

from __future__ import annotations

import sys

import tremula.popxl
from tremula.alias import install

install("popxl", "tremula.popxl")
sys.modules[__name__] = tremula.popxl
