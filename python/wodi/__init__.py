"""WoDi for Python: a parallel map over a CARMI pool.

    import wodi

    def square(x):
        return x * x

    with wodi.Pool() as pool:
        print(pool.map(square, range(1000)))

Every process of the computation runs the same script: the master (the one
you start), and the workers WoDi starts on the pool's hosts, in which
``wodi.Pool()`` serves steps and exits instead of returning. Functions are
sent by reference (pickle), so they must be defined at the top level of the
script, above the ``with``. Each ``map`` is one WoDi cycle: steps are ordered
longest-first from the previous cycles, every result arrives once, and a
step lost with its host is run again elsewhere.
"""

import json
import os
import pickle
import subprocess
import stat
import sys
import tempfile

from . import _native

__all__ = ["Pool", "StepError", "SHELL", "serve", "init_data", "started_as_worker"]

_CONNECT_ARG = "--wodi-connect="

SHELL = [sys.executable, "-m", "wodi._shell"]
"""The command worker ``wodi.Pool(worker=wodi.SHELL)`` runs: each input is a
shell command line (``sh -c``), its result the command's standard output
(bytes); a command that exits non-zero fails its step with its status and
standard error."""


class StepError(Exception):
    """A step raised: the message names the step's index and its input,
    and carries the worker's traceback."""

    def __init__(self, index, item, reason):
        super().__init__(f"step {index} failed on input {item!r}:\n{reason}")
        self.index = index
        self.item = item
        self.reason = reason


# Steps travel as the frames' payload: a pickle of (function, input) to a
# worker running this script, a pickle of the result back.
def _run_step(data):
    func, item = pickle.loads(data)
    return pickle.dumps(func(item))


_NO_INIT = object()
_init = _NO_INIT


def init_data():
    """In a worker: the ``init`` given to ``wodi.Pool`` (unpickled for a
    worker running the master's script, bytes for a command worker's
    ``wodi.serve``), or None when none was given."""
    return None if _init is _NO_INIT else _init


def _set_init(data, decode):
    global _init
    _init = decode(data)


# A worker sees the master's arguments only: WoDi's own (which the native
# part reads from the process's arguments) would confuse the script's parsing.
_STARTED_AS_WORKER = any(a.startswith(_CONNECT_ARG) for a in sys.argv)
sys.argv = [a for a in sys.argv if not a.startswith(_CONNECT_ARG)]


def started_as_worker():
    """True in a process WoDi started as a worker."""
    return _STARTED_AS_WORKER


def serve(func):
    """For a worker command's own script: in a process WoDi started as a
    worker, serves steps with ``func`` (a step's input bytes in, bytes or
    str out; the init data is ``wodi.init_data()``, bytes) and exits;
    elsewhere returns at once."""
    if started_as_worker():
        # Without init data, the pool sends JSON's null (what WoDi's Rust
        # workers read): that is None here.
        _native.serve_worker(func, lambda data: _set_init(data, lambda d: None if d == b"null" else d))
        sys.exit(0)


def _worker_script(command):
    """An executable that runs ``command`` (an argument list) from this
    directory with this interpreter's module path: the worker the pool
    runs (a file, since the pool stages an executable and runs it with
    arguments; a staged copy of the interpreter would lose its venv)."""
    fd, path = tempfile.mkstemp(prefix="wodi-worker-", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("#!/bin/sh\n")
        f.write(f"cd {_quote(os.getcwd())}\n")
        f.write(f"PYTHONPATH={_quote(os.pathsep.join(sys.path))} ")
        args = " ".join(_quote(a) for a in command)
        f.write(f"exec {args} \"$@\"\n")
    os.chmod(path, stat.S_IRWXU)
    return path


def _as_bytes(x, what):
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode()
    raise TypeError(f"{what} of a command worker must be bytes or str, not {type(x).__name__}")


def _carmi_command():
    """The ``carmi`` that starts and stops an embedded pool: ``$CARMI_BIN``
    if set, else the one this package carries (``python -m wodi._carmi``,
    built from the same sources as this module, so it speaks its protocol;
    a ``carmi`` on the PATH may be of another version and is not used)."""
    carmi = os.environ.get("CARMI_BIN")
    if carmi:
        return [carmi]
    from . import _carmi

    return _carmi.command()


def _start_embedded_pool(hosts):
    """No pool is configured: starts an embedded one on this machine with
    ``carmi pool up`` (see ``_carmi_command``); returns the ``carmi``
    command that stops it."""
    carmi = _carmi_command()
    up = subprocess.run(
        [*carmi, "pool", "up", "--hosts", str(max(hosts, 1))], capture_output=True, text=True
    )
    if up.returncode != 0:
        raise RuntimeError(f"`carmi pool up` failed: {up.stderr.strip()}")
    return carmi


def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


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
    for a command worker)."""

    def __init__(self, hosts=4, requirements="true", local=None, secret=None, worker=None,
                 init=None):
        self._command = worker is not None
        if started_as_worker():
            if self._command:
                raise RuntimeError("this script was started as a WoDi worker, but its pool "
                                   "runs another worker command")
            _native.serve_worker(_run_step, lambda data: _set_init(data, pickle.loads))
            sys.exit(0)
        self.stats = None
        self._embedded = None
        if self._command:
            command = worker.split() if isinstance(worker, str) else list(worker)
            init = None if init is None else _as_bytes(init, "the init data")
        else:
            command = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
            init = pickle.dumps(init)
        if not (local and secret) and not _native.pool_configured():
            self._embedded = _start_embedded_pool(hosts)
        self._script = _worker_script(command)
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
        )

    def _encode(self, func, items):
        if self._command:
            if func is not None:
                raise TypeError("the workers run a command: pass None as the function")
            return [_as_bytes(x, "a step input") for x in items]
        return [pickle.dumps((func, x)) for x in items]

    def _decode(self, data):
        return data if self._command else pickle.loads(data)

    def map(self, func, items):
        """Runs ``func`` on every item, one WoDi cycle; returns the results
        in input order. Raises StepError for the first item whose call
        raised (after the cycle's other steps have come back). On a pool of
        command workers, ``func`` is None."""
        items = list(items)
        outcomes = self._native.map(self._encode(func, items))
        results = []
        for i, (ok, data) in enumerate(outcomes):
            if not ok:
                raise StepError(i, items[i], data)
            results.append(self._decode(data))
        return results

    def map_unordered(self, func, items):
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
            if ok:
                yield items[i], self._decode(data)
            elif failed is None:
                failed = StepError(i, items[i], data)
        if failed is not None:
            raise failed
    def close(self):
        """Stops the workers, releases the hosts; returns the run's
        statistics (a dict: efficiency, steps_delivered, ...)."""
        if self.stats is None:
            self.stats = json.loads(self._native.close())
            try:
                os.unlink(self._script)
            except OSError:
                pass
            if self._embedded:
                subprocess.run([*self._embedded, "pool", "down"], capture_output=True)
        return self.stats

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
