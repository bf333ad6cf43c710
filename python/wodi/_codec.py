"""How calls travel: a step's payload names its function and carries its
arguments; its result, or the exception it raised with the worker's
traceback, comes back pickled.

A payload is ``len(function) (4 bytes, little-endian) + function + args``:
the function's pickle comes first, once per ``map`` (or ``submit``), and a
worker unpickles each distinct function once (a lambda's by-value pickle
costs tens of microseconds to make and to load; a call should cost a few).
The arguments are a pickle of ``(args, kwargs)``.

Pickling: by reference with ``pickle`` where the worker can import the
object; by value with ``cloudpickle`` where it cannot: lambdas, closures,
and (for workers that do not run the master's script) anything of
``__main__``, a script's or a notebook's own functions and classes.
"""

from __future__ import annotations

import base64
import linecache
import pickle
import re
import sys
import traceback
from typing import Any, Callable, Dict, Optional, Tuple

import cloudpickle

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(obj: Any, portable: bool) -> bytes:
    """``obj`` pickled so that a worker can load it: by reference where
    ``pickle`` can do that, by value (``cloudpickle``) for what it cannot
    (lambdas, closures) and, when ``portable`` (workers that do not run the
    master's script), for anything referring to ``__main__``."""
    try:
        data = pickle.dumps(obj, _PROTOCOL)
    except Exception:
        return cloudpickle.dumps(obj, _PROTOCOL)
    # A reference to the master's script, which such a worker does not
    # run. A false alarm (the text in some string) only costs time.
    if portable and b"__main__" in data:
        return cloudpickle.dumps(obj, _PROTOCOL)
    return data


def function_header(func: Callable[..., Any], portable: bool) -> bytes:
    """The start of every payload that calls ``func`` (see the module's doc)."""
    data = dumps(func, portable)
    return len(data).to_bytes(4, "little") + data


def payload(header: bytes, args: Tuple[Any, ...], kwargs: Dict[str, Any], portable: bool) -> bytes:
    """A step that calls the function of ``header`` with these arguments."""
    return header + dumps((args, kwargs or None), portable)


class Failure:
    """A call raised: the exception (None if it did not pickle), its
    one-line description and the worker's formatted traceback."""

    __slots__ = ("exc", "text", "tb")

    def __init__(self, exc: Any, text: str, tb: str) -> None:
        self.exc = exc
        self.text = text
        self.tb = tb

    def __reduce__(self):
        return (Failure, (self.exc, self.text, self.tb))


class StepError(Exception):
    """A step failed. For ``Pool.map``: the call raised (``index`` and
    ``item`` name its input, ``reason`` is the worker's traceback). For
    both ``Pool`` and ``Executor``: WoDi gave up on the step (its workers
    crashed on it too often, or a command worker failed); ``reason`` says
    why (``index`` and ``item`` are None for an executor's call)."""

    def __init__(self, index: Any, item: Any, reason: str) -> None:
        if index is None:
            message = f"the call failed: {reason}"
        else:
            message = f"step {index} failed on input {item!r}:\n{reason}"
        super().__init__(message)
        self.index = index
        self.item = item
        self.reason = reason

    def __reduce__(self):
        return (StepError, (self.index, self.item, self.reason))


class RemoteTraceback(Exception):
    """The worker's traceback of a failed call: the ``__cause__`` of the
    exception the caller gets, so that Python prints it above the
    caller's own traceback (as ``concurrent.futures``' process pool does)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class RemoteError(Exception):
    """A call raised an exception that could not be pickled back: its type
    and message (the worker's traceback is the ``__cause__``)."""


def exception_of(failure: Failure) -> BaseException:
    """The exception to raise in the caller for ``failure``, with the
    worker's traceback chained as its cause."""
    exc = failure.exc if isinstance(failure.exc, BaseException) else RemoteError(failure.text)
    exc.__cause__ = RemoteTraceback(_with_sources(failure.tb))
    return exc


# cloudpickle names the file of code sent by value "<dynamic-code>".
_DYNAMIC_FRAME = re.compile(r'^  File "<dynamic-code>", line (\d+), in (\w+)$', re.M)


def _with_sources(tb: str) -> str:
    """The worker's traceback with the file and source line of frames in
    functions of this process's ``__main__`` (a script's or notebook's,
    sent by value), which the worker cannot name."""
    main = sys.modules.get("__main__")

    def named(m: "re.Match[str]") -> str:
        line, name = int(m.group(1)), m.group(2)
        code = getattr(getattr(main, name, None), "__code__", None)
        if code is None or line < code.co_firstlineno:
            return m.group(0)
        source = linecache.getline(code.co_filename, line).strip()
        where = f'  File "{code.co_filename}", line {line}, in {name}'
        return where + (f"\n    {source}" if source else "")

    return _DYNAMIC_FRAME.sub(named, tb)


# Worker side. Functions already loaded, by their pickle (a few per run).
_functions: Dict[bytes, Callable[..., Any]] = {}


def _function(key: bytes) -> Callable[..., Any]:
    func = _functions.get(key)
    if func is None:
        if len(_functions) >= 256:
            _functions.clear()
        func = _functions[key] = pickle.loads(key)
    return func


class CallFailed(Exception):
    """Raised by ``run_step`` when the call raised: the native worker fails
    the step with ``wodi_reason`` as its reason (a ``Failure``, pickled,
    in base64 after ``_FAILURE``), so that WoDi counts a failed step (its
    time is not learned as the step's length) and the caller gets the
    exception back."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.wodi_reason = reason


_FAILURE = "wodi-python-failure:"


def run_step(data: bytes) -> bytes:
    """In a worker: runs the call ``data`` describes; returns the pickled
    result, or raises ``CallFailed`` carrying the call's exception."""
    n = int.from_bytes(data[:4], "little")
    func = _function(data[4 : 4 + n])
    args, kwargs = pickle.loads(memoryview(data)[4 + n :])
    try:
        result = func(*args, **kwargs) if kwargs else func(*args)
    except Exception as e:
        raise CallFailed(_FAILURE + base64.b64encode(_failure(e)).decode()) from None
    try:
        return pickle.dumps(result, _PROTOCOL)
    except Exception:
        # A result of a class sent by value (defined in the master's
        # script or notebook): by value back.
        try:
            return cloudpickle.dumps(result, _PROTOCOL)
        except Exception as e:
            raise CallFailed(_FAILURE + base64.b64encode(_failure(e)).decode()) from None


def failure_of(reason: str) -> Optional[Failure]:
    """The ``Failure`` a failed step's reason carries, or None for a step
    that failed otherwise (its worker crashed, a command failed)."""
    # The server tells where the failure came from before the worker's reason.
    at = reason.find(_FAILURE)
    if at < 0:
        return None
    encoded = reason[at + len(_FAILURE) :].split(None, 1)
    try:
        return pickle.loads(base64.b64decode(encoded[0] if encoded else ""))
    except Exception:
        return None


def _failure(e: BaseException) -> bytes:
    # From the called function's frame on (run_step's own is no news).
    frames = e.__traceback__.tb_next if e.__traceback__ is not None else None
    tb = "".join(traceback.format_exception(type(e), e, frames or e.__traceback__))
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    e.__traceback__ = None
    try:
        return pickle.dumps(Failure(e, text, tb), _PROTOCOL)
    except Exception:
        try:
            return cloudpickle.dumps(Failure(e, text, tb), _PROTOCOL)
        except Exception:
            return pickle.dumps(Failure(None, text, tb), _PROTOCOL)


def call_chunk(func: Callable[..., Any], chunk: Any) -> list:
    """One step of ``Executor.map`` with ``chunksize`` > 1: the calls of
    ``chunk`` (argument tuples), their results as a list."""
    return [func(*args) for args in chunk]


def loads(data: bytes) -> Any:
    """A result as the worker pickled it."""
    return pickle.loads(data)
