"""``wodi.Executor``: ``concurrent.futures.Executor`` on a WoDi run."""

from __future__ import annotations

import atexit
import collections
import concurrent.futures as cf
import functools
import itertools
import json
import sys
import threading
import time
import weakref
from typing import Any, Callable, Deque, Iterable, Iterator, List, Optional, Tuple, Union

from . import _codec, _launch, _native, _progress
from ._codec import StepError

# Executors not yet shut down, shut down (waiting) when the interpreter exits.
_open: "weakref.WeakSet[Executor]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for executor in list(_open):
        executor.shutdown(wait=True)


class BrokenExecutor(cf.BrokenExecutor):
    """The WoDi run behind the executor ended (its server or pool went
    away): pending calls fail with this, and so does any new ``submit``."""


class _MapCalls:
    """The calls of one ``map``: no future each (a future costs more than
    a short call), their results in one list, the caller's iterator
    waiting on one condition, notified once per burst of results."""

    __slots__ = ("payloads", "taken", "results", "cond", "closed")

    def __init__(self, payloads: List[bytes]) -> None:
        self.payloads: List[Optional[bytes]] = list(payloads)
        self.taken = 0
        self.results: List[Any] = [_PENDING] * len(payloads)
        self.cond = threading.Condition(threading.Lock())
        self.closed = False

    def settle(self, i: int, value: Any) -> None:
        """Records call ``i``'s result (or ``_Raised``) without notifying."""
        self.results[i] = value

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def fail_rest(self, exc: BaseException) -> int:
        """Fails the calls not yet handed to the pool; returns how many."""
        n = len(self.payloads) - self.taken
        for i in range(self.taken, len(self.payloads)):
            self.results[i] = _Raised(exc)
        self.taken = len(self.payloads)
        self.notify()
        return n


class _Raised:
    """A map call's exception, in place of its result."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_PENDING = object()

# What waits to be handed to the pool: one call (its future and payload),
# or a map's calls. What is out: a future, or a map's calls and an index.
_Call = Tuple[cf.Future, bytes]
_Queued = Union[_Call, _MapCalls]
_Target = Union[cf.Future, Tuple[_MapCalls, int]]


class Executor(cf.Executor):
    """A ``concurrent.futures.Executor`` whose calls run on a CARMI pool,
    on ``max_workers`` hosts matching ``requirements`` (a ClassAd
    expression), found as ``carmi`` finds it (or ``local`` and ``secret``
    given; an embedded pool on this machine when none is configured).

    ``submit``, ``map``, ``as_completed``, ``wait``, ``shutdown`` and
    ``with`` behave as for ``ProcessPoolExecutor``, and asyncio's
    ``loop.run_in_executor(executor, fn, x)`` works with it. The workers run
    ``python -m wodi._pyworker`` (not this script): functions and classes of
    ``__main__`` (a script's or a notebook's), lambdas and closures travel
    by value (``cloudpickle``), importable functions by reference. A call
    that raises raises the same exception from ``Future.result()``, the
    worker's traceback chained as its ``__cause__``.

    Calls go out first come, first served. At most ``window`` calls
    (default: twice the calls the workers may hold) are handed to the pool
    ahead of their results; the others wait here, not started, and
    ``Future.cancel()`` cancels them. ``prefetch``: calls each worker
    holds. The default (None) adapts per worker: one call while its calls
    are long against the trip to the server (a call never queues behind
    another on a slow host), up to 16 while they are short (the trip is
    hidden behind the calls in hand); a number fixes it.

    ``init``: data every worker reads with ``wodi.init_data()``;
    ``initializer(*initargs)`` runs in each worker before its first call
    (a function sent by value has globals of its own: keep state for
    later calls in ``init``, or in a module the worker imports).
    ``progress``: None shows calls done in a notebook (a bar with
    ``ipywidgets``, text without) and nothing elsewhere; True shows it
    anywhere (text on standard error outside a notebook); False never.
    """

    def __init__(
        self,
        max_workers: int = 4,
        *,
        requirements: str = "true",
        local: Optional[str] = None,
        secret: Optional[str] = None,
        init: Any = None,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Tuple[Any, ...] = (),
        progress: Any = None,
        window: Optional[int] = None,
        prefetch: Optional[int] = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        prefetch, prefetch_max = _launch.prefetch_range(prefetch)
        self._hosts = max_workers
        self._window = window if window is not None else 2 * prefetch_max * max_workers
        if self._window < 1:
            raise ValueError("window must be at least 1")
        self._lock = threading.Lock()
        self._queue: Deque[_Queued] = collections.deque()
        self._shutdown = False
        self._broken: Optional[str] = None
        self._waker: Any = None
        # The futures of the calls handed to the pool, by step index in
        # the open cycle (None once resolved).
        self._cycle: List[Optional[_Target]] = []
        self.stats: Optional[dict] = None
        """The run's statistics once shut down (see ``wodi.Pool.close``)."""
        self._progress = _progress.make(progress)
        self._embedded = None
        if not (local and secret) and not _native.pool_configured():
            self._embedded = _launch.start_embedded_pool(max_workers)
        self._script = _launch.worker_script([sys.executable, "-m", "wodi._pyworker"])
        init_bytes = _codec.dumps((init, initializer, tuple(initargs)), True)
        args = (self._script, [], max_workers, requirements, sys.executable,
                ["-m", "wodi._server"], local, secret, init_bytes, prefetch, True, prefetch_max)
        started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._thread = threading.Thread(
            target=self._run, args=(args, started), name="wodi-executor", daemon=True)
        self._thread.start()
        started.wait()
        if self._start_error is not None:
            self._cleanup()
            raise self._start_error
        _open.add(self)

    # The caller's side.

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        """Schedules ``fn(*args, **kwargs)`` on a worker; returns its
        ``Future``. The function and arguments are pickled here: what does
        not pickle raises at once."""
        header = _codec.function_header(fn, True)
        future: cf.Future = cf.Future()
        self._enqueue([(future, _codec.payload(header, args, kwargs, True))], 1)
        return future

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """``map(fn, *iterables)`` computed on the workers: an iterator
        over the results in order, raising a call's exception where its
        result would be (``TimeoutError`` if a result is not there
        ``timeout`` seconds after this call). All inputs are read and
        submitted at once, the function pickled once. ``chunksize`` > 1
        sends that many calls as one step (fewer, larger messages for very
        short calls). Closing the iterator early cancels the calls not
        yet started."""
        if chunksize < 1:
            raise ValueError("chunksize must be at least 1")
        deadline = None if timeout is None else time.monotonic() + timeout
        calls = zip(*iterables)
        if chunksize == 1:
            header = _codec.function_header(fn, True)
            payloads = [_codec.payload(header, a, None, True) for a in calls]
        else:
            header = _codec.function_header(functools.partial(_codec.call_chunk, fn), True)
            chunks = iter(lambda: list(itertools.islice(calls, chunksize)), [])
            payloads = [_codec.payload(header, (c,), None, True) for c in chunks]
        job = _MapCalls(payloads)
        self._enqueue([job], len(payloads))
        return _map_results(job, deadline, chunksize > 1)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls; with ``cancel_futures``, calls not yet started are
        cancelled. The run ends (workers stopped, hosts released, an
        embedded pool stopped) once the other calls are done; ``wait``
        waits for that. ``stats`` then holds the run's statistics."""
        with self._lock:
            self._shutdown = True
            cancelled = 0
            if cancel_futures:
                while self._queue:
                    queued = self._queue.popleft()
                    if isinstance(queued, _MapCalls):
                        cancelled += queued.fail_rest(cf.CancelledError())
                    elif queued[0].cancel():
                        cancelled += 1
        for _ in range(cancelled):
            self._finished(ok=False)
        self._wake()
        if wait:
            self._thread.join()
            # Without waiting, the exit hook still waits for the run's end
            # (its workers stopped, an embedded pool stopped).
            _open.discard(self)

    def __exit__(self, *exc: Any) -> bool:
        self.shutdown(wait=True)
        return False

    def _enqueue(self, calls: List[_Queued], n: int) -> None:
        with self._lock:
            if self._broken is not None:
                raise BrokenExecutor(self._broken)
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._queue.extend(calls)
        if self._progress is not None:
            self._progress.submitted(n)
        self._wake()

    def _wake(self) -> None:
        if self._waker is not None:
            self._waker.wake()

    def _finished(self, ok: bool) -> None:
        if self._progress is not None:
            self._progress.finished(ok)

    # The dispatcher: a thread that owns the native pool.

    def _run(self, args: tuple, started: threading.Event) -> None:
        try:
            native = _native.NativePool(*args)
            self._waker = native.waker()
        except BaseException as e:
            self._start_error = e
            started.set()
            return
        started.set()
        try:
            self._dispatch(native)
        except BaseException as e:
            self._break(f"the WoDi run ended: {e}")
        finally:
            try:
                self.stats = json.loads(native.close())
            except Exception:
                pass
            if self._progress is not None:
                self._progress.close()
            self._cleanup()

    def _dispatch(self, native: Any) -> None:
        out = 0
        while True:
            batch = self._take(self._window - out)
            if batch:
                first = native.extend([data for _, data in batch])
                if first == 0:
                    self._cycle = []
                self._cycle.extend(target for target, _ in batch)
                out += len(batch)
            elif out == 0 and self._done():
                return
            touched = set()
            for index, ok, data in native.next_or_wake():
                target = self._cycle[index]
                self._cycle[index] = None
                out -= 1
                if type(target) is tuple:
                    job, i = target
                    job.settle(i, self._outcome(ok, data, _Raised))
                    touched.add(job)
                else:
                    self._resolve(target, ok, data)
            for job in touched:
                job.notify()

    def _take(self, room: int) -> List[Tuple[_Target, bytes]]:
        """Up to ``room`` calls to hand to the pool, marked running
        (cancelled ones dropped)."""
        batch: List[Tuple[_Target, bytes]] = []
        cancelled = 0
        with self._lock:
            while self._queue and len(batch) < room:
                queued = self._queue[0]
                if isinstance(queued, _MapCalls):
                    if queued.closed:
                        self._queue.popleft()
                        cancelled += queued.fail_rest(cf.CancelledError())
                        continue
                    start = queued.taken
                    end = min(len(queued.payloads), start + room - len(batch))
                    for i in range(start, end):
                        batch.append(((queued, i), queued.payloads[i]))
                        queued.payloads[i] = None
                    queued.taken = end
                    if end == len(queued.payloads):
                        self._queue.popleft()
                    continue
                self._queue.popleft()
                if queued[0].set_running_or_notify_cancel():
                    batch.append(queued)
                else:
                    cancelled += 1
        for _ in range(cancelled):
            self._finished(ok=False)
        return batch

    def _done(self) -> bool:
        with self._lock:
            return self._shutdown and not self._queue

    def _outcome(self, ok: bool, data: Any, raised: Callable[[BaseException], Any]) -> Any:
        """A call's result, or ``raised(exception)``."""
        if ok:
            try:
                result = _codec.loads(data)
            except Exception as e:
                result = raised(e)
        else:
            failure = _codec.failure_of(data)
            if failure is None:
                result = raised(StepError(None, None, data))
            else:
                result = raised(_codec.exception_of(failure))
        self._finished(ok=type(result) is not _Raised and not isinstance(result, _Failed))
        return result

    def _resolve(self, future: cf.Future, ok: bool, data: Any) -> None:
        result = self._outcome(ok, data, _Failed)
        if isinstance(result, _Failed):
            future.set_exception(result.exc)
        else:
            future.set_result(result)

    def _break(self, why: str) -> None:
        with self._lock:
            self._broken = why
            queued = list(self._queue)
            self._queue.clear()
        for entry in queued:
            if isinstance(entry, _MapCalls):
                entry.fail_rest(BrokenExecutor(why))
            elif entry[0].set_running_or_notify_cancel():
                entry[0].set_exception(BrokenExecutor(why))
        for target in self._cycle:
            if type(target) is tuple:
                target[0].settle(target[1], _Raised(BrokenExecutor(why)))
                target[0].notify()
            elif target is not None and not target.done():
                target.set_exception(BrokenExecutor(why))

    def _cleanup(self) -> None:
        _launch.remove(self._script)
        embedded, self._embedded = self._embedded, None
        _launch.stop_embedded_pool(embedded)


class _Failed:
    """A submitted call's exception (see ``Executor._outcome``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _map_results(job: _MapCalls, deadline: Optional[float], chunked: bool) -> Iterator[Any]:
    """The results of a map's calls in order (flattened if ``chunked``);
    closing the iterator early cancels the calls not yet started."""
    try:
        for i in range(len(job.results)):
            result = job.results[i]
            if result is _PENDING:
                with job.cond:
                    while job.results[i] is _PENDING:
                        wait = None if deadline is None else deadline - time.monotonic()
                        if wait is not None and wait <= 0:
                            raise cf.TimeoutError()
                        job.cond.wait(wait)
                result = job.results[i]
            if type(result) is _Raised:
                raise result.exc
            if chunked:
                yield from result
            else:
                yield result
    finally:
        job.closed = True
