"""Tests that run Graphcore's popxl-addons (MIT, unmodified, read-only) on Tremula, as its
users import it: from the clients folder (``$TREMULA_CLIENTS``, default
``../shared/clients``), put on ``sys.path`` by ``tests/conftest.py``. When it is absent,
each module here is one test that skips saying how to provide it (fails under ``CI=true``):
``CLIENT_FOLDERS`` in ``tests/conftest.py``."""
