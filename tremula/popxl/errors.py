"""PopXL's ``popxl.errors``: the exception PopXL programs catch by this import path. The
class itself lives with Tremula's other errors, in :mod:`tremula.errors`."""

from tremula.errors import UndefinedValue

__all__ = ["UndefinedValue"]
