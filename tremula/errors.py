"""Tremula's exception classes, in one place.

Every error names the thing at fault (tensor, vertex, tile, stream, option...), the expected
and the actual value, so that a user can fix the call without reading Tremula's source.
Classes subclass the matching built-in exception where one fits, so that code written for
the real SDK (which catches ``ValueError``, ``TypeError`` ...) keeps working.
"""

from __future__ import annotations


class TremulaError(Exception):
    """Base class of every error Tremula raises on purpose."""


class GraphError(TremulaError, ValueError):
    """A graph is ill-formed: bad mapping, bad connection, bad shape or type."""


class TensorError(GraphError):
    """A tensor view or tensor operation got arguments it cannot honour."""


class CodeletError(GraphError):
    """A codelet definition or a vertex connection does not match the codelet's fields."""


class ProgramError(TremulaError, ValueError):
    """A control program is ill-formed (wrong operand kinds, shapes or types)."""


class VerifyError(GraphError):
    """``Graph.verify()`` or compilation found the graph or program inconsistent."""


class OutOfMemoryError(TremulaError, MemoryError):
    """The compiled program does not fit in tile memory."""


class EngineError(TremulaError, RuntimeError):
    """The engine was used out of order (run before load) or with bad host buffers."""


class ApplicationRuntimeError(EngineError):
    """A running program met a value it cannot honour (Poplar's
    ``poplar::application_runtime_error``, PopXL's ``popart.poplar_application_runtime_error``):
    e.g. a float8 ``log2_scale`` outside the 6-bit signed range."""


class StreamError(EngineError, ValueError):
    """A host stream, host handle or remote buffer was connected or used incorrectly."""


class TargetError(TremulaError, ValueError):
    """A target or device parameter is invalid."""


class ProfileError(TremulaError, ValueError):
    """A profile does not follow the Poplar profile format or breaks one of its invariants."""


class PopartException(TremulaError):
    """PopART's ``popart.popart_exception``: the IR refused a program. PopXL programs catch
    it by that name (``import popart``)."""


class PopartInternalException(PopartException):
    """PopART's ``popart.popart_internal_exception``: a check inside PopART's core failed
    (for example grouped initialiser data without one row per group)."""


class PopartRuntimeError(PopartException):
    """PopART's ``popart.popart_runtime_error``: a session refused a run-time request (for
    example a weights buffer of the wrong byte size)."""


class IRError(GraphError, PopartException):
    """A PopXL graph the IR cannot transform (autodiff of a graph that modifies its inputs,
    or overwrites a value the backward pass needs): a ``GraphError`` that is also
    ``popart.popart_exception``, as the real SDK raises."""


class VariableDataError(TensorError, PopartException):
    """Host data that do not fit a variable's replica grouping (a grouping of several groups
    needs one row per group): PopART's C++ check ("Return mismatch with possibly appended
    outer dimension"), so a ``popart.popart_exception`` that is also a ``ValueError``."""


class UndefinedValue(TremulaError, ValueError):
    """PopXL's ``popxl.errors.UndefinedValue``: a property that has no value, such as the
    IPU of a tensor created outside ``popxl.ipu``. Also a ``ValueError``."""


def format_bytes(n: int) -> str:
    """``n`` bytes for a message: ``16.0 GiB``, ``624.0 KiB``, ``512 B``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def reworded(err: Exception, message: str) -> Exception:
    """``err`` as an exception of the same type carrying ``message`` (used to add the names
    of the tensors or streams involved) and ``err``'s traceback; ``err`` itself if its type
    cannot be made from a message alone."""
    try:
        new = type(err)(message)
    except Exception:
        return err
    return new.with_traceback(err.__traceback__)


class Float8DtypeError(TremulaError, TypeError, RuntimeError):
    """A float8 host helper given a dtype that is not float8: PopXL raises ``RuntimeError``
    from its C++ converters; also a ``TypeError``, the kind of mistake it is."""


class DtypeError(TremulaError, ValueError, TypeError):
    """A value that names no PopXL dtype (``popxl.dtype.as_dtype`` / ``from_name``): PopXL
    raises ``ValueError``; also a ``TypeError``, the kind of mistake it is."""


class OpSetupError(GraphError, PopartException):
    """An op whose inputs do not fit its shape rule (shapes that do not broadcast, concat
    or split sizes, matmul contracting dimensions): PopART refuses it in the C++ op setup
    with ``popart.popart_exception``; also a ``ValueError``."""


class OpSetupTypeError(PopartException, TypeError):
    """An op whose input dtypes do not fit its type rule (``incompatible types FLOAT and
    FLOAT16``): ``popart.popart_exception`` as PopART raises it, also a ``TypeError``."""


class TensorIdError(PopartException, KeyError):
    """A tensor id a graph does not hold (``Graph.get_tensor``): PopART's
    ``popart.popart_exception``; also a ``KeyError``, as Tremula raised before."""


class EmbeddingError(TremulaError, ValueError):
    """A host embedding was created, registered or used incorrectly (``tremula.embedding``):
    a bad shape, strategy or optimizer spec, an embedding run without being registered."""


class DistributedError(TremulaError, RuntimeError):
    """Instances of a PopRun job disagree or cannot reach each other: a collective device
    call (``Session.run``, a weight transfer) made on only some instances, a peer that does
    not answer within the collective time-out, or MPI missing."""


class DistributedConfigError(DistributedError, ValueError):
    """The PopRun / PopDist layout is invalid: replicas that the instances do not divide,
    ``POPDIST_*`` variables that contradict each other or the MPI world."""


class UnsupportedBindingError(NotImplementedError, AttributeError):
    """A method PopART binds on a ``popart._internal.ir`` class (``Op.getSettings``) that
    Tremula does not provide: ``NotImplementedError`` naming the class and method, and also
    an ``AttributeError``, so that ``hasattr`` and ``getattr(obj, name, default)`` answer
    that the object has no such method instead of raising."""
