"""PopXL's ``popxl.testing``: helpers for tests written against PopXL (not loaded by
``import popxl``; import it yourself)."""

from tremula.popxl.testing._dtypes import get_all_dtypes, get_all_int_dtypes

__all__ = ["get_all_dtypes", "get_all_int_dtypes"]
