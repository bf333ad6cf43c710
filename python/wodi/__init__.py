"""WoDi for Python: calls run on a CARMI pool's hosts.

Two ways in:

``wodi.Executor``, a ``concurrent.futures.Executor`` (``submit``, ``map``,
``as_completed``, ``wait``, asyncio's ``run_in_executor``)::

    import wodi

    with wodi.Executor(max_workers=4) as ex:
        print(list(ex.map(lambda x: x * x, range(1000))))

Its workers run ``python -m wodi._pyworker``: lambdas, closures and the
functions of a script or notebook travel by value (cloudpickle); a call
that raises raises in the caller, the worker's traceback as its cause.

``wodi.Pool``, WoDi's cycles: each ``map`` is one cycle whose steps are
ordered longest-first from the previous cycles, every result arrives once,
and a step lost with its host is run again elsewhere::

    def square(x):
        return x * x

    with wodi.Pool() as pool:
        print(pool.map(square, range(1000)))

A pool's workers run this same script, in which ``wodi.Pool()`` serves
steps and exits instead of returning: its functions go by reference
(pickle), so they must be defined at the top level, above the ``with``
(lambdas and closures go by value).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _codec, _launch, _native, _progress, _worker
from ._codec import RemoteError, RemoteTraceback, StepError
from ._executor import BrokenExecutor, Executor

__all__ = [
    "Pool", "Executor", "StepError", "BrokenExecutor", "RemoteTraceback", "RemoteError", "SHELL",
    "serve", "init_data", "started_as_worker",
]

_CONNECT_ARG = "--wodi-connect="

SHELL = [sys.executable, "-m", "wodi._shell"]
"""The command worker ``wodi.Pool(worker=wodi.SHELL)`` runs: each input is a
shell command line (``sh -c``), its result the command's standard output
(bytes); a command that exits non-zero fails its step with its status and
standard error."""


def init_data() -> Any:
    """In a worker: the ``init`` given to ``wodi.Pool`` or ``wodi.Executor``
    (unpickled for Python workers, bytes for a command worker's
    ``wodi.serve``), or None when none was given."""
    return _worker.init_data()


# A worker sees the master's arguments only: WoDi's own (which the native
# part reads from the process's arguments) would confuse the script's parsing.
_STARTED_AS_WORKER = any(a.startswith(_CONNECT_ARG) for a in sys.argv)
sys.argv = [a for a in sys.argv if not a.startswith(_CONNECT_ARG)]


def started_as_worker() -> bool:
    """True in a process WoDi started as a worker."""
    return _STARTED_AS_WORKER


def serve(func: Callable[[bytes], Union[bytes, str]]) -> None:
    """For a worker command's own script: in a process WoDi started as a
    worker, serves steps with ``func`` (a step's input bytes in, bytes or
    str out; the init data is ``wodi.init_data()``, bytes) and exits;
    elsewhere returns at once."""
    if started_as_worker():
        # Without init data, the pool sends JSON's null (what WoDi's Rust
        # workers read): that is None here.
        _native.serve_worker(func, lambda data: _worker.set_init(None if data == b"null" else data))
        sys.exit(0)


def _as_bytes(x: Any, what: str) -> bytes:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode()
    raise TypeError(f"{what} of a command worker must be bytes or str, not {type(x).__name__}")


class Pool:
    """A WoDi run on the pool, found as ``carmi`` finds it (or ``local`` and
    ``secret`` given), with ``hosts`` workers on hosts matching
    ``requirements`` (a ClassAd expression).

    The workers run this same script (the default) or ``worker``, a
    command (a list of arguments, or a string split on spaces) that is a
    WoDi worker: ``wodi.SHELL``, a Python script that calls
    ``wodi.serve(func)``, or any program built on WoDi's worker library.
    Steps to a command worker are bytes (str is sent as UTF-8) and its
    results come back as bytes.

    ``init``: data every worker gets before its first step, read there with
    ``wodi.init_data()`` (pickled for this script's workers; bytes or str
    for a command worker). ``prefetch``: steps each worker holds; the
    default (None) adapts: a worker holds one step while its steps are long
    against the round trip to the server (WoDi's longest-first placement
    stays exact) and up to 16 while they are short (calls of microseconds
    run at tens of thousands a second); a number fixes it."""

    def __init__(self, hosts: int = 4, requirements: str = "true", local: Optional[str] = None,
                 secret: Optional[str] = None, worker: Union[None, str, Sequence[str]] = None,
                 init: Any = None, prefetch: Optional[int] = None) -> None:
        self._command = worker is not None
        if started_as_worker():
            if self._command:
                raise RuntimeError("this script was started as a WoDi worker, but its pool "
                                   "runs another worker command")
            _worker.serve(lambda data: _worker.set_init(pickle.loads(data)))
            sys.exit(0)
        self.stats: Optional[dict] = None
        if not self._command and _progress.in_notebook():
            raise RuntimeError(
                "wodi.Pool runs this script in its workers, and a notebook is no script: "
                "use wodi.Executor (its workers need no script: the notebook's functions "
                "travel by value), or give Pool a worker command (worker=...)")
        self._embedded = None
        if self._command:
            command = worker.split() if isinstance(worker, str) else list(worker)
            init = None if init is None else _as_bytes(init, "the init data")
        else:
            command = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
            init = _codec.dumps(init, False)
        prefetch, prefetch_max = _launch.prefetch_range(prefetch)
        if not (local and secret) and not _native.pool_configured():
            self._embedded = _launch.start_embedded_pool(hosts)
        self._script = _launch.worker_script(command)
        self._native = _native.NativePool(
            self._script,
            [],
            hosts,
            requirements,
            sys.executable,
            ["-m", "wodi._server"],
            local,
            secret,
            init,
            prefetch,
            False,
            prefetch_max,
        )

    def _encode(self, func: Optional[Callable[[Any], Any]], items: List[Any]) -> List[bytes]:
        if self._command:
            if func is not None:
                raise TypeError("the workers run a command: pass None as the function")
            return [_as_bytes(x, "a step input") for x in items]
        # The workers run this script: its functions go by reference,
        # lambdas and closures by value.
        header = _codec.function_header(func, False)
        return [_codec.payload(header, (x,), None, False) for x in items]

    def _outcome(self, i: int, item: Any, ok: bool, data: Any) -> Tuple[bool, Any]:
        """``(True, result)`` or ``(False, StepError)`` for step ``i``."""
        if ok:
            return True, (data if self._command else _codec.loads(data))
        failure = None if self._command else _codec.failure_of(data)
        if failure is None:
            return False, StepError(i, item, data)
        error = StepError(i, item, failure.tb)
        error.__cause__ = _codec.exception_of(failure)
        return False, error

    def map(self, func: Optional[Callable[[Any], Any]], items: Iterable[Any]) -> List[Any]:
        """Runs ``func`` on every item, one WoDi cycle; returns the results
        in input order. Raises StepError for the first item whose call
        raised (after the cycle's other steps have come back). On a pool of
        command workers, ``func`` is None."""
        items = list(items)
        outcomes = self._native.map(self._encode(func, items))
        results = []
        for i, (ok, data) in enumerate(outcomes):
            ok, value = self._outcome(i, items[i], ok, data)
            if not ok:
                raise value
            results.append(value)
        return results

    def map_unordered(self, func: Optional[Callable[[Any], Any]],
                      items: Iterable[Any]) -> Iterator[Tuple[Any, Any]]:
        """Like ``map``, one cycle, but yields ``(item, result)`` pairs as the
        results arrive. Once every success has been yielded, raises
        StepError for the first item whose call raised. A loop left early
        leaves the cycle's remaining steps to finish (their results are
        dropped) before the next cycle starts."""
        items = list(items)
        self._native.begin(self._encode(func, items))
        failed = None
        while True:
            outcome = self._native.next()
            if outcome is None:
                break
            i, ok, data = outcome
            ok, value = self._outcome(i, items[i], ok, data)
            if ok:
                yield items[i], value
            elif failed is None:
                failed = value
        if failed is not None:
            raise failed

    def close(self) -> Optional[dict]:
        """Stops the workers, releases the hosts; returns the run's
        statistics (a dict: efficiency, steps_delivered, ...)."""
        if self.stats is None:
            self.stats = json.loads(self._native.close())
            _launch.remove(self._script)
            _launch.stop_embedded_pool(self._embedded)
        return self.stats

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False
