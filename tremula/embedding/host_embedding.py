"""``create_host_embedding`` and ``HostEmbedding``: the user-facing object (TensorFlow-IPU's
``embedding_ops`` API, offered to PopXL programs).

A :class:`HostEmbedding` owns its table (a :class:`~tremula.embedding.table.HostTable`) and
hands it to the sessions it is registered with: ``lookup`` adds a ``HostEmbeddingLookup``
op to the PopXL graph in context; ``register(session)`` binds the table to a
``popxl.Session`` for the runs made inside the ``with`` block (the lowering's run hook
connects the host callbacks, or fills the remote buffers, when a run starts).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.embedding import ops as emb_ops
from tremula.embedding.optimizers import HostEmbeddingOptimizerSpec, check_spec
from tremula.embedding.partition import check_strategy
from tremula.embedding.table import HostTable, new_state
from tremula.errors import EmbeddingError
from tremula.popxl import dtypes
from tremula.popxl.tensor import Tensor

if TYPE_CHECKING:
    from tremula.popxl.session import Session

_OPTIONS = {"remote_buffer": False}


def enable_remote_buffer_embedding(enabled: bool = True) -> None:
    """Make ``remote_buffer=True`` the default of :func:`create_host_embedding` (TensorFlow-IPU's
    ``IPUConfig.experimental.enable_remote_buffer_embedding``)."""
    if not isinstance(enabled, bool):
        raise EmbeddingError(f"enable_remote_buffer_embedding: expected a bool, got {enabled!r}")
    _OPTIONS["remote_buffer"] = enabled


def remote_buffer_embedding_enabled() -> bool:
    """The default of ``remote_buffer``."""
    return _OPTIONS["remote_buffer"]


_DTYPES = (dtypes.float32, dtypes.float16)


def _check_shape(shape: Any, where: str) -> tuple[int, int]:
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    ok = dims is not None and len(dims) == 2
    ok = ok and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims)  # type: ignore[union-attr]
    if not ok or min(dims) < 1:  # type: ignore[arg-type]
        raise EmbeddingError(
            f"{where}: shape must be 2-D [tokens, encoding] of positive integers, got {shape!r}"
        )
    return int(dims[0]), int(dims[1])  # type: ignore[index]


def _check_dtype(dtype: Any, where: str) -> dtypes.dtype:
    try:
        d = dtypes.dtype.as_dtype(dtype)
    except (TypeError, ValueError, KeyError):
        d = None
    if d not in _DTYPES:
        raise EmbeddingError(
            f"{where}: dtype must be popxl.float32 or popxl.float16, got {dtype!r}"
        )
    return d  # type: ignore[return-value]


def _initial_table(
    initializer: Any, shape: tuple[int, int], dtype: dtypes.dtype, writable: bool, where: str
) -> np.ndarray:
    """The table from ``initializer``: zeros, a copy of an array (a memmap is used in place),
    the result of a callable ``(shape, numpy dtype)``, or a ``.npy`` file opened as a
    memmap."""
    want = dtype.as_numpy()
    if initializer is None:
        return np.zeros(shape, want)
    if isinstance(initializer, (str, os.PathLike)):
        return _open_memmap(Path(initializer), shape, want, writable, where)
    if callable(initializer) and not isinstance(initializer, np.ndarray):
        value = initializer(shape, want)  # NumPy's dtype: np.ones(shape, dtype) works
        what = f"the initializer's result ({type(value).__name__})"
    else:
        value, what = initializer, "initializer"
    arr = np.asarray(value)
    if arr.shape != shape:
        raise EmbeddingError(f"{where}: {what} has shape {arr.shape}, expected {shape}")
    if isinstance(value, np.memmap) and arr.dtype == want:
        return value  # used in place: the table lives in the file
    if arr.dtype.kind not in "fiu":
        raise EmbeddingError(f"{where}: {what} must hold numbers, got {arr.dtype}")
    return np.array(arr, dtype=want)


def _open_memmap(
    path: Path, shape: tuple[int, ...], want: np.dtype, writable: bool, where: str
) -> np.ndarray:
    if not path.is_file():
        raise EmbeddingError(f"{where}: initializer path {str(path)!r} is not a file")
    try:
        arr = np.load(path, mmap_mode="r+" if writable else "r")
    except (OSError, ValueError) as err:
        raise EmbeddingError(f"{where}: cannot open {str(path)!r} as a .npy table: {err}") from None
    if arr.shape != shape or arr.dtype != want:
        raise EmbeddingError(
            f"{where}: {str(path)!r} holds {arr.dtype} {arr.shape}; expected {want} {shape}"
        )
    _random_access(arr)
    return arr


def _random_access(arr: np.ndarray) -> None:
    """Tell the OS that a memmap is read at random (no read-ahead, no mapping of the pages
    around a fault), so that lookups bring in only the pages of the rows they read."""
    mm = getattr(arr, "_mmap", None)
    if mm is not None and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)


def create_host_embedding(
    name: str,
    shape: Any,
    dtype: Any,
    partition_strategy: str = "TOKEN",
    optimizer_spec: HostEmbeddingOptimizerSpec | None = None,
    initializer: np.ndarray | Callable[..., Any] | str | os.PathLike | None = None,
    remote_buffer: bool | None = None,
) -> HostEmbedding:
    """Create a host embedding: a ``[tokens, encoding]`` table in host memory, looked up
    (and trained) by PopXL programs.

    Args:
        name: a name (unique among the embeddings a program uses).
        shape: ``[tokens, encoding]``.
        dtype: ``popxl.float32`` or ``popxl.float16``.
        partition_strategy: ``"TOKEN"`` or ``"ENCODING"``: how a remote-buffer table is
            split between replicas (``tremula/embedding/partition.py``); ignored in host
            mode.
        optimizer_spec: how lookups' gradients update the table
            (:class:`HostEmbeddingOptimizerSpec` ...); None: inference only.
        initializer: None (zeros), an array of ``shape`` (copied; a ``np.memmap`` of the
            table's dtype is used in place), a callable ``(shape, numpy_dtype) -> array``
            (as TensorFlow calls an initializer with the shape and its dtype), or the
            path of a ``.npy`` file, opened as a memmap (read-write when the embedding
            trains: updates are written to the file) so that the table need not fit in RAM.
        remote_buffer: keep the table in remote buffers split between replicas instead of
            host memory (default: :func:`enable_remote_buffer_embedding`'s setting).

    Returns:
        The :class:`HostEmbedding`.

    Raises:
        EmbeddingError: a bad name, shape, dtype, strategy, optimizer spec or initializer;
            an optimizer the device cannot apply with ``remote_buffer``.
    """
    where = f"create_host_embedding({name!r})"
    if not isinstance(name, str) or not name or "/" in name:
        raise EmbeddingError(f"{where}: name must be a non-empty string without '/'")
    shape = _check_shape(shape, where)
    dtype = _check_dtype(dtype, where)
    strategy = check_strategy(partition_strategy, where)
    spec = check_spec(optimizer_spec, where)
    remote = remote_buffer_embedding_enabled() if remote_buffer is None else remote_buffer
    if not isinstance(remote, bool):
        raise EmbeddingError(f"{where}: remote_buffer must be a bool, got {remote_buffer!r}")
    if remote and spec is not None and spec.trainable and not spec.on_device:
        raise EmbeddingError(
            f"{where}: the {spec.name} optimizer is applied on the host; remote-buffer "
            f"embeddings are updated by the device with SGD (HostEmbeddingOptimizerSpec or "
            f"HostEmbeddingSGDGAOptimizerSpec)"
        )
    writable = spec is not None and spec.trainable
    table = _initial_table(initializer, shape, dtype, writable, where)
    return HostEmbedding(name, HostTable(name, table, spec), dtype, strategy, remote)


class HostEmbedding:
    """A table in host memory (or in remote buffers) that PopXL programs look up and train.

    Made by :func:`create_host_embedding`. ``lookup`` in a graph; ``register(session)``
    around the runs; ``get_embedding_tensor()`` for the table.
    """

    def __init__(
        self, name: str, table: HostTable, dtype: dtypes.dtype, strategy: str, remote: bool
    ) -> None:
        self._name = name
        self.table = table
        self._dtype = dtype
        self._strategy = strategy
        self._remote = remote
        self._session: Session | None = None
        #: remote-buffer mode: the device buffers need the host table (registered since)
        self._needs_load = False
        #: remote-buffer mode: the device has run since the host table was synced
        self._stale = False
        self._sync: Callable[[], None] | None = None  # reads the device buffers back

    # ---- properties ----
    @property
    def name(self) -> str:
        return self._name

    @property
    def shape(self) -> tuple[int, int]:
        return (self.table.tokens, self.table.encoding)

    @property
    def dtype(self) -> dtypes.dtype:
        return self._dtype

    @property
    def partition_strategy(self) -> str:
        return self._strategy

    @property
    def optimizer_spec(self) -> HostEmbeddingOptimizerSpec | None:
        return self.table.spec

    @property
    def remote_buffer(self) -> bool:
        return self._remote

    @property
    def trainable(self) -> bool:
        spec = self.table.spec
        return spec is not None and spec.trainable

    def __repr__(self) -> str:
        mode = "remote buffers" if self._remote else "host memory"
        spec = self.table.spec or "inference only"
        return (
            f"HostEmbedding({self._name!r}, shape={list(self.shape)}, dtype={self._dtype}, "
            f"{mode}, {self._strategy}, {spec})"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"HostEmbedding {self._name!r} is not callable (SDK 1.1's API); use "
            f"`with embedding.register(session):` around the runs"
        )

    # ---- in a graph ----
    def lookup(
        self, indices: Tensor, clip_indices: bool = True, deduplicate: Any = False
    ) -> Tensor:
        """Look rows of the table up, in the PopXL graph in context.

        Args:
            indices: an integer tensor (int32; other integer types are cast) of any shape.
            clip_indices: clamp indices into ``[0, tokens - 1]`` (for the update too);
                False refuses an out-of-range index at run time (``ApplicationRuntimeError``
                naming it).
            deduplicate: host mode: send only the distinct indices to the host (and their
                rows back; the device expands them), fewer bytes for the same result.
                ``True`` sizes the list for the worst case (``min(n, tokens)``); an integer
                is a smaller capacity (a run with more distinct indices fails, naming the
                count). Updates are then summed per distinct index on the device. Ignored by
                remote-buffer embeddings (they do not talk to the host).

        Returns:
            ``[*indices.shape, encoding]`` of the table's dtype. Differentiable: autodiff
            sends its gradient to the table's optimizer (see ``tremula.embedding.ops``).

        Raises:
            TypeError: indices that are not an integer Tensor.
            EmbeddingError: a bad ``deduplicate``.
        """
        return emb_ops.lookup(self, indices, clip_indices, deduplicate)

    # ---- sessions ----
    def register(self, session: Session, inference_only: bool = False) -> Registration:
        """A context manager binding the table to ``session`` for the runs inside it.

        Args:
            session: a ``popxl.Session`` whose program uses this embedding.
            inference_only: allow a trainable embedding (an optimizer spec that asks for
                updates) with a program that never updates it (only looks it up).

        Raises (on entering):
            EmbeddingError: already registered; a session whose IR does not use the
                embedding; a trainable embedding and a program that never updates it
                (without ``inference_only``).
        """
        return Registration(self, session, inference_only)

    def get_embedding_tensor(self) -> np.ndarray:
        """The live host table (after remote-buffer runs, gathered back from the replicas'
        partitions first)."""
        self._synchronise()
        return self.table.array

    def statistics(self) -> dict[str, float]:
        """What the host did for this embedding (calls, rows, bytes, its own seconds):
        reported apart from the profile, whose cycles are modelled."""
        return self.table.stats.as_dict()

    def _synchronise(self) -> None:
        if self._stale and self._sync is not None:
            self._sync()
            self._stale = False

    # ---- files ----
    def save(self, path: str | os.PathLike) -> list[Path]:
        """Write the table to ``path`` (a ``.npy`` file) and each optimizer state array to
        ``<stem>.<state>.npy`` beside it (with ``<stem>.steps.npy``, the updates applied).
        Gradients accumulated in an unfinished window are not saved.

        Returns:
            The files written.
        """
        self._synchronise()
        files = _paths(path, self.table.state)
        np.save(files["table"], self.table.array)
        for k, arr in self.table.state.items():
            np.save(files[k], arr)
        if self.table.state:
            np.save(files["steps"], np.array(self.table.steps, np.int64))
        return list(files.values())

    def load(self, path: str | os.PathLike, mmap: bool = False) -> None:
        """Read a table (and optimizer state) saved by :meth:`save`. All files are checked
        before anything changes. State files the optimizer does not use are ignored;
        missing ones start afresh.

        Args:
            path: the table's ``.npy`` file.
            mmap: use the file in place as a memmap (read-write if the embedding trains)
                instead of copying it into the current table.

        Raises:
            EmbeddingError: a missing file, or a shape or dtype other than this table's.
        """
        files = _paths(path, {k: None for k in self.table.state})
        where = f"HostEmbedding {self._name!r}.load"
        want = self._dtype.as_numpy()
        table = _open_memmap(files["table"], self.shape, want, mmap and self.trainable, where)
        state = {}
        for k, shape in (
            self.table.spec.state_shapes(self.shape) if self.table.spec else {}
        ).items():
            if files[k].is_file():
                state[k] = _open_memmap(files[k], shape, np.dtype(np.float32), False, where)
        steps = int(np.load(files["steps"])) if files.get("steps", Path()).is_file() else 0
        self._synchronise()
        if mmap:
            self.table.array = table
        else:
            self.table.array[...] = table
        fresh = new_state(self.table.spec, self.shape) if self.table.spec else {}
        self.table.state = {k: np.array(state.get(k, fresh[k])) for k in fresh}
        self.table.steps = steps if state else 0
        self.table.discard_pending()
        self._needs_load = self._session is not None


def _paths(path: str | os.PathLike, state: dict[str, Any]) -> dict[str, Path]:
    p = Path(path)
    if p.suffix != ".npy":
        p = p.with_name(p.name + ".npy")
    stem = p.with_suffix("")
    out = {"table": p}
    out.update({k: stem.with_name(f"{stem.name}.{k}.npy") for k in state})
    if state:
        out["steps"] = stem.with_name(f"{stem.name}.steps.npy")
    return out


class Registration:
    """``HostEmbedding.register(session)``: binds the embedding to the session while inside."""

    def __init__(self, embedding: HostEmbedding, session: Any, inference_only: bool) -> None:
        self.embedding = embedding
        self.session = session
        self.inference_only = inference_only

    def __enter__(self) -> HostEmbedding:
        from tremula.popxl.session import Session

        emb, session = self.embedding, self.session
        where = f"HostEmbedding {emb.name!r}.register"
        if not isinstance(session, Session):
            raise EmbeddingError(f"{where}: expected a popxl.Session, got {type(session).__name__}")
        if emb._session is not None:
            which = "this session" if emb._session is session else "another session"
            raise EmbeddingError(  # TensorFlow's words first
                f"Cannot register host embedding with id={emb.name!r} it already exists! "
                f"({where}: already registered with {which}; leave that `with` block first)"
            )
        graphs = session.ir.graphs
        if not emb_ops.uses(graphs, emb):
            raise EmbeddingError(
                f"{where}: the program of this session does not use the embedding (no lookup "
                f"of it in its IR)"
            )
        if (
            emb.trainable
            and not self.inference_only
            and not emb_ops.uses(graphs, emb, "HostEmbeddingUpdate")
        ):
            raise EmbeddingError(
                f"{where}: the optimizer spec {emb.optimizer_spec} asks for updates, but the "
                f"program of this session only looks the embedding up (autodiff of a graph "
                f"with its lookup gives the update); register(session, inference_only=True) "
                f"to look a trained table up, or create it without an optimizer spec"
            )
        emb._session = session
        emb._needs_load = True
        return emb

    def __exit__(self, *exc: Any) -> None:
        emb = self.embedding
        try:
            emb._synchronise()
        finally:
            emb._session = None
            emb._sync = None
