"""``popart``: the parts of PopART that PopXL programs use directly, served by Tremula.

So far its exception classes: ``popart.popart_exception`` is what the IR raises when it
refuses a program (for example autodiff of a graph that modifies its inputs), and
``popart.poplar_application_runtime_error`` what a run raises when the program fails on the
device (for example a float8 ``log2_scale`` outside the 6-bit signed range).
"""

from __future__ import annotations

from tremula.errors import ApplicationRuntimeError as poplar_application_runtime_error
from tremula.errors import PopartException as popart_exception

__all__ = ["popart_exception", "poplar_application_runtime_error"]
