"""``popart``: an alias of :mod:`tremula.popart`, so existing PopART and PopXL programs run
unmodified (``import popart``; ``popart.X`` is the module ``tremula.popart.X``).

``popart.popart_exception`` is what the IR raises when it refuses a program and
``popart.poplar_application_runtime_error`` what a run raises when the device refuses a
value: the classes of :mod:`tremula.errors`.
"""

from __future__ import annotations

from tremula.alias import install

install("popart", "tremula.popart")

from tremula.popart import *  # noqa: E402, F403
from tremula.popart import __all__, __version__  # noqa: E402, F401
