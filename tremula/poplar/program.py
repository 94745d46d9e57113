"""Control programs: the tree the engine runs.

Program nodes are values built by their constructors; ``Sequence.add`` is the one mutator
(Poplar's API), usable until the sequence is given to an engine. Operand kinds and shapes are
checked here, when the node is built.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tremula.errors import ProgramError
from tremula.poplar.handles import (
    ComputeSet,
    DataStream,
    Function,
    FunctionBuffer,
    HostFunction,
    RemoteBuffer,
)
from tremula.poplar.tensor import Tensor


class Program:
    """Base class of program nodes."""

    name: str = ""

    def children(self) -> tuple[Program, ...]:
        return ()


def _check_program(p: object, where: str) -> Program:
    if not isinstance(p, Program):
        raise ProgramError(f"{where}: expected a program, got {type(p).__name__}")
    return p


@dataclass(eq=False)
class Sequence(Program):
    """Run programs one after another."""

    programs: list[Program] = field(default_factory=list)
    name: str = ""

    def __init__(self, programs: Iterable[Program] = (), name: str = "") -> None:
        self.programs = [_check_program(p, f"Sequence {name!r}") for p in programs]
        self.name = name

    def add(self, program: Program) -> Sequence:
        self.programs.append(_check_program(program, f"Sequence.add ({self.name!r})"))
        return self

    def children(self) -> tuple[Program, ...]:
        return tuple(self.programs)


@dataclass(frozen=True, eq=False)
class Execute(Program):
    """Run every vertex of a compute set."""

    compute_set: ComputeSet
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.compute_set, ComputeSet):
            raise ProgramError(
                f"Execute: expected a ComputeSet, got {type(self.compute_set).__name__}"
            )


@dataclass(frozen=True, eq=False)
class Repeat(Program):
    """Run ``body`` ``count`` times."""

    count: int
    body: Program
    name: str = ""

    def __post_init__(self) -> None:
        if int(self.count) != self.count or self.count < 0:
            raise ProgramError(f"Repeat: count must be a non-negative integer, got {self.count!r}")
        _check_program(self.body, "Repeat body")

    def children(self) -> tuple[Program, ...]:
        return (self.body,)


def _check_predicate(t: object, where: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise ProgramError(f"{where}: the predicate must be a Tensor, got {type(t).__name__}")
    if t.num_elements != 1:
        raise ProgramError(f"{where}: the predicate must have one element, got shape {t.shape}")
    return t


@dataclass(frozen=True, eq=False)
class _RepeatWhile(Program):
    condition: Program
    predicate: Tensor
    body: Program
    name: str = ""
    until: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        where = type(self).__name__
        _check_program(self.condition, f"{where} condition")
        _check_predicate(self.predicate, where)
        _check_program(self.body, f"{where} body")

    def children(self) -> tuple[Program, ...]:
        return (self.condition, self.body)


@dataclass(frozen=True, eq=False)
class RepeatWhileTrue(_RepeatWhile):
    """Run ``condition``; while ``predicate`` is true, run ``body`` then ``condition``."""


@dataclass(frozen=True, eq=False)
class RepeatWhileFalse(_RepeatWhile):
    """Run ``condition``; while ``predicate`` is false, run ``body`` then ``condition``."""

    until: bool = field(default=True, init=False)


@dataclass(frozen=True, eq=False)
class If(Program):
    """Run ``then`` if the one-element ``predicate`` is non-zero, else ``else_``."""

    predicate: Tensor
    then: Program
    else_: Program = field(default_factory=lambda: Sequence())
    name: str = ""

    def __post_init__(self) -> None:
        _check_predicate(self.predicate, "If")
        _check_program(self.then, "If then-branch")
        _check_program(self.else_, "If else-branch")

    def children(self) -> tuple[Program, ...]:
        return (self.then, self.else_)


@dataclass(frozen=True, eq=False)
class Switch(Program):
    """Run the case whose value equals the integer ``control`` tensor, else ``default``."""

    control: Tensor
    cases: tuple[tuple[int, Program], ...] = ()
    default: Program = field(default_factory=lambda: Sequence())
    name: str = ""

    def __init__(
        self,
        control: Tensor,
        cases: Seq[tuple[int, Program]] = (),
        default: Program | None = None,
        name: str = "",
    ) -> None:
        _check_predicate(control, "Switch")
        if not control.dtype.is_integral:
            raise ProgramError(f"Switch: control must be an integer tensor, got {control.dtype}")
        values = [int(v) for v, _ in cases]
        if len(set(values)) != len(values):
            raise ProgramError(f"Switch: duplicate case values in {values}")
        object.__setattr__(self, "control", control)
        object.__setattr__(
            self, "cases", tuple((int(v), _check_program(p, f"Switch case {v}")) for v, p in cases)
        )
        object.__setattr__(self, "default", default if default is not None else Sequence())
        object.__setattr__(self, "name", name)

    def add(self, value: int, program: Program) -> Switch:
        """A new Switch with one more case (programs are values)."""
        return Switch(self.control, [*self.cases, (value, program)], self.default, self.name)

    def children(self) -> tuple[Program, ...]:
        return (*(p for _, p in self.cases), self.default)


Copyable = Tensor | DataStream | RemoteBuffer | FunctionBuffer | Function


@dataclass(frozen=True, eq=False)
class Copy(Program):
    """Copy tensor to tensor, stream to tensor, tensor to stream, tensor to or from a
    remote buffer row (``offset``: an int or an integer tensor of row indices), or load a
    function's code from its function buffer."""

    src: Copyable
    dst: Copyable
    offset: int | Tensor | None = None
    name: str = ""

    def __post_init__(self) -> None:
        s, d = self.src, self.dst
        kind = (type(s).__name__, type(d).__name__)
        if isinstance(s, Tensor) and isinstance(d, Tensor):
            if s.dtype is not d.dtype:
                raise ProgramError(f"Copy: source type {s.dtype} != destination type {d.dtype}")
            if s.shape != d.shape:
                raise ProgramError(f"Copy: source shape {s.shape} != destination shape {d.shape}")
        elif isinstance(s, DataStream) and isinstance(d, Tensor):
            self._check_stream(s, d, "host_to_device")
        elif isinstance(s, Tensor) and isinstance(d, DataStream):
            self._check_stream(d, s, "device_to_host")
        elif isinstance(s, RemoteBuffer) and isinstance(d, Tensor):
            self._check_remote(s, d)
        elif isinstance(s, Tensor) and isinstance(d, RemoteBuffer):
            self._check_remote(d, s)
        elif isinstance(s, FunctionBuffer) and isinstance(d, Function):
            if s.function is not d:
                raise ProgramError(f"Copy: function buffer holds {s.function!r}, not {d!r}")
        else:
            raise ProgramError(f"Copy: cannot copy from {kind[0]} to {kind[1]}")

    def _check_stream(self, stream: DataStream, t: Tensor, direction: str) -> None:
        if stream.direction != direction:
            raise ProgramError(
                f"Copy: stream {stream.name!r} is {stream.direction}, used as {direction}"
            )
        if stream.dtype is not t.dtype:
            raise ProgramError(
                f"Copy: stream {stream.name!r} has type {stream.dtype}, tensor has {t.dtype}"
            )
        if stream.num_elements != t.num_elements:
            raise ProgramError(
                f"Copy: stream {stream.name!r} carries {stream.num_elements} "
                f"elements, tensor has {t.num_elements} (shape {t.shape})"
            )

    def _check_remote(self, buf: RemoteBuffer, t: Tensor) -> None:
        if buf.dtype is not t.dtype:
            raise ProgramError(
                f"Copy: remote buffer {buf.name!r} has type {buf.dtype}, tensor has {t.dtype}"
            )
        off = self.offset
        if isinstance(off, (int, np.integer)) and not isinstance(off, bool):
            off = int(off)
            object.__setattr__(self, "offset", off)
        elif off is not None and not isinstance(off, Tensor):
            raise ProgramError(
                f"Copy: remote buffer offset must be an int or an integer tensor, got "
                f"{type(off).__name__}"
            )
        rows = 1 if off is None or isinstance(off, int) else off.num_elements
        if isinstance(off, Tensor) and not off.dtype.is_integral:
            raise ProgramError(
                f"Copy: remote buffer offset must be an integer tensor, got {off.dtype}"
            )
        if isinstance(off, int) and not 0 <= off < buf.repeats:
            raise ProgramError(
                f"Copy: offset {off} out of range for remote buffer "
                f"{buf.name!r} with {buf.repeats} repeats"
            )
        if t.num_elements != rows * buf.num_elements:
            raise ProgramError(
                f"Copy: remote buffer {buf.name!r} rows have "
                f"{buf.num_elements} elements; {rows} row(s) need "
                f"{rows * buf.num_elements}, tensor has {t.num_elements}"
            )


@dataclass(frozen=True, eq=False)
class CrossReplicaCopy(Program):
    """Copy ``src`` on replica ``s`` to ``dst`` on replica ``replica_map[s]`` for every
    entry of the map (Poplar's ``CrossReplicaCopy``); other replicas' ``dst`` is unchanged.
    It crosses the IPU-links, so it is costed and profiled as a global exchange."""

    src: Tensor
    dst: Tensor
    replica_map: tuple[tuple[int, int], ...]
    name: str = ""

    def __init__(
        self, src: Tensor, dst: Tensor, replica_map: dict[int, int], name: str = ""
    ) -> None:
        if not isinstance(src, Tensor) or not isinstance(dst, Tensor):
            raise ProgramError("CrossReplicaCopy: source and destination must be tensors")
        if src.dtype is not dst.dtype or src.shape != dst.shape:
            raise ProgramError(
                f"CrossReplicaCopy: source {src.dtype}{list(src.shape)} and "
                f"destination {dst.dtype}{list(dst.shape)} differ"
            )
        pairs = tuple(sorted((int(s), int(d)) for s, d in dict(replica_map).items()))
        dests = [d for _, d in pairs]
        if len(set(dests)) != len(dests):
            raise ProgramError(f"CrossReplicaCopy: two sources copy to one replica in {pairs}")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "replica_map", pairs)
        object.__setattr__(self, "name", name)


@dataclass(frozen=True, eq=False)
class Sync(Program):
    """A barrier: ``internal`` (the tiles of an IPU) or ``external`` (all IPUs and replicas)."""

    sync_type: str = "internal"
    name: str = ""

    def __post_init__(self) -> None:
        st = str(self.sync_type).lower()
        if st not in ("internal", "external", "global"):
            raise ProgramError(
                f"Sync: sync type {self.sync_type!r} unknown; expected 'internal' or 'external'"
            )
        object.__setattr__(self, "sync_type", "external" if st == "global" else st)


class SyncType:
    INTERNAL = "internal"
    EXTERNAL = "external"
    GLOBAL = "external"


@dataclass(frozen=True, eq=False)
class Call(Program):
    """Call a graph function, or a host function with input and output tensors."""

    function: Function | HostFunction
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    name: str = ""

    def __init__(
        self,
        function: Function | HostFunction,
        inputs: Seq[Tensor] = (),
        outputs: Seq[Tensor] = (),
        name: str = "",
    ) -> None:
        object.__setattr__(self, "function", function)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "name", name)
        if isinstance(function, Function):
            if inputs or outputs:
                raise ProgramError("Call: a graph function takes no tensor arguments")
        elif isinstance(function, HostFunction):
            self._check_args("input", function.inputs, self.inputs, function.name)
            self._check_args("output", function.outputs, self.outputs, function.name)
        else:
            raise ProgramError(
                f"Call: expected a Function or HostFunction, got {type(function).__name__}"
            )

    @staticmethod
    def _check_args(kind: str, specs: tuple, tensors: tuple, name: str) -> None:
        if len(specs) != len(tensors):
            raise ProgramError(
                f"Call host function {name!r}: {len(specs)} {kind}(s) declared, "
                f"{len(tensors)} given"
            )
        for i, (spec, t) in enumerate(zip(specs, tensors)):
            if not isinstance(t, Tensor):
                raise ProgramError(f"Call host function {name!r}: {kind} {i} is not a Tensor")
            if spec.dtype is not t.dtype or spec.num_elements != t.num_elements:
                raise ProgramError(
                    f"Call host function {name!r}: {kind} {i} declared "
                    f"{spec.dtype}[{spec.num_elements}], got "
                    f"{t.dtype}[{t.num_elements}]"
                )


@dataclass(frozen=True, eq=False)
class WriteUndef(Program):
    """Mark a tensor's contents undefined: its variables' live ranges start after this."""

    tensor: Tensor
    name: str = ""


@dataclass(frozen=True)
class PrintTensorFmt:
    """How ``PrintTensor`` lays a value out (Poplar's ``PrintTensorFmt``, whose fields are
    NumPy's print options): more than ``summarise_threshold`` elements are summarised to
    ``edge_items`` per edge, lines wrap at ``max_line_width`` (0 turns either off), floats
    show ``digits`` digits in ``float_format`` ("auto", "fixed", "scientific" or "none":
    as many as needed to tell values apart), elements are joined by ``separator`` and
    lists enclosed in ``open_bracket`` / ``close_bracket``.

    Raises:
        ProgramError: an unknown float format, or a bracket that is not one character.
    """

    summarise_threshold: int = 1000
    edge_items: int = 3
    max_line_width: int = 75
    digits: int = 8
    float_format: str = "auto"
    separator: str = " "
    open_bracket: str = "["
    close_bracket: str = "]"

    def __post_init__(self) -> None:
        if self.float_format not in ("auto", "fixed", "scientific", "none"):
            raise ProgramError(
                f"PrintTensorFmt: float_format must be 'auto', 'fixed', 'scientific' or "
                f"'none', got {self.float_format!r}"
            )
        for what in ("open_bracket", "close_bracket"):
            if len(getattr(self, what)) != 1:
                raise ProgramError(
                    f"PrintTensorFmt: {what} must be one character, got {getattr(self, what)!r}"
                )

    def format(self, value: np.ndarray) -> str:
        """``value`` laid out as this format says."""
        float_kind = None
        if self.float_format == "scientific":
            digits = self.digits
            float_kind = lambda v: np.format_float_scientific(v, precision=digits)  # noqa: E731
        mode: Literal["maxprec", "fixed", "unique"] = "maxprec"
        if self.float_format in ("fixed", "none"):
            mode = "fixed" if self.float_format == "fixed" else "unique"
        text = np.array2string(
            value,
            max_line_width=self.max_line_width or sys.maxsize,
            precision=self.digits,
            separator=self.separator,
            threshold=self.summarise_threshold or sys.maxsize,
            edgeitems=self.edge_items,
            floatmode=mode,
            formatter=None if float_kind is None else {"float_kind": float_kind},
        )
        return text.translate(str.maketrans("[]", self.open_bracket + self.close_bracket))


@dataclass(frozen=True, eq=False)
class PrintTensor(Program):
    """Print a tensor's value on the host (Poplar's ``PrintTensor(title, tensor, fmt)``):
    ``title: value``, the value laid out by ``fmt`` (None: NumPy's layout with ", ")."""

    title: str
    tensor: Tensor | None = None
    name: str = ""
    fmt: PrintTensorFmt | None = None

    def __init__(
        self,
        title: str | Tensor,
        tensor: Tensor | None = None,
        name: str = "",
        fmt: PrintTensorFmt | None = None,
    ) -> None:
        if isinstance(title, Tensor):  # PrintTensor(tensor)
            tensor, title = title, ""
        if not isinstance(tensor, Tensor):
            raise ProgramError("PrintTensor: expected a Tensor")
        if fmt is not None and not isinstance(fmt, PrintTensorFmt):
            raise ProgramError(f"PrintTensor: fmt must be a PrintTensorFmt, got {fmt!r}")
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "tensor", tensor)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "fmt", fmt)


def walk(program: Program) -> Iterable[Program]:
    """Every node of a program tree, parents before children (functions not entered)."""
    stack = [program]
    while stack:
        p = stack.pop()
        yield p
        stack.extend(reversed(p.children()))
