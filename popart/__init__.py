"""``popart``: the parts of PopART that PopXL programs use directly, served by Tremula.

So far its exception class: ``popart.popart_exception`` is what the IR raises when it refuses
a program (for example autodiff of a graph that modifies its inputs).
"""

from __future__ import annotations

from tremula.errors import PopartException as popart_exception

__all__ = ["popart_exception"]
