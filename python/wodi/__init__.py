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

import base64
import json
import os
import pickle
import shutil
import subprocess
import stat
import sys
import tempfile

from . import _native

__all__ = ["Pool", "StepError"]

_CONNECT_ARG = "--wodi-connect="


class StepError(Exception):
    """A step raised: the message names the step's index and its input,
    and carries the worker's traceback."""

    def __init__(self, index, item, reason):
        super().__init__(f"step {index} failed on input {item!r}:\n{reason}")
        self.index = index
        self.item = item
        self.reason = reason


def _encode(obj):
    return base64.b64encode(pickle.dumps(obj)).decode("ascii")


def _decode(text):
    return pickle.loads(base64.b64decode(text))


def _run_step(text):
    func, item = _decode(text)
    return _encode(func(item))


# A worker sees the master's arguments only: WoDi's own (which the native
# part reads from the process's arguments) would confuse the script's parsing.
_STARTED_AS_WORKER = any(a.startswith(_CONNECT_ARG) for a in sys.argv)
sys.argv = [a for a in sys.argv if not a.startswith(_CONNECT_ARG)]


def started_as_worker():
    """True in a process WoDi started as a worker."""
    return _STARTED_AS_WORKER


def _worker_script():
    """An executable that runs this interpreter on this script: the worker
    command (a file, since the pool runs an executable with arguments)."""
    script = os.path.abspath(sys.argv[0])
    fd, path = tempfile.mkstemp(prefix="wodi-worker-", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("#!/bin/sh\n")
        f.write(f"cd {_quote(os.getcwd())}\n")
        f.write(f"PYTHONPATH={_quote(os.pathsep.join(sys.path))} ")
        # The master's own arguments too: the script parses them before
        # it reaches `wodi.Pool()`.
        args = " ".join(_quote(a) for a in [sys.executable, script, *sys.argv[1:]])
        f.write(f"exec {args} \"$@\"\n")
    os.chmod(path, stat.S_IRWXU)
    return path


def _start_embedded_pool(hosts):
    """No pool is configured: starts an embedded one on this machine with
    ``carmi pool up`` (``$CARMI_BIN``, else ``carmi`` on the PATH); returns
    the ``carmi`` that stops it."""
    carmi = os.environ.get("CARMI_BIN") or shutil.which("carmi")
    if not carmi:
        raise RuntimeError(
            "no CARMI pool is configured (CARMI_LOCAL and CARMI_SECRET, `carmi pool up`, "
            "or ~/.config/carmi/config.toml), and no `carmi` to start one "
            "(put it on the PATH or set CARMI_BIN)"
        )
    up = subprocess.run(
        [carmi, "pool", "up", "--hosts", str(max(hosts, 1))], capture_output=True, text=True
    )
    if up.returncode != 0:
        raise RuntimeError(f"`carmi pool up` failed: {up.stderr.strip()}")
    return carmi


def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


class Pool:
    """A WoDi run on the pool, found as ``carmi`` finds it (or ``local`` and
    ``secret`` given), with ``hosts`` workers on hosts matching
    ``requirements`` (a ClassAd expression)."""

    def __init__(self, hosts=4, requirements="true", local=None, secret=None):
        if started_as_worker():
            _native.serve_worker(_run_step)
            sys.exit(0)
        self.stats = None
        self._embedded = None
        if not (local and secret) and not _native.pool_configured():
            self._embedded = _start_embedded_pool(hosts)
        self._script = _worker_script()
        self._native = _native.NativePool(
            self._script,
            [],
            hosts,
            requirements,
            sys.executable,
            ["-m", "wodi._server"],
            local,
            secret,
        )

    def map(self, func, items):
        """Runs ``func`` on every item, one WoDi cycle; returns the results
        in input order. Raises StepError for the first item whose call
        raised (after the cycle's other steps have come back)."""
        items = list(items)
        outcomes = self._native.map([_encode((func, x)) for x in items])
        results = []
        for i, (ok, data) in enumerate(outcomes):
            if not ok:
                raise StepError(i, items[i], data)
            results.append(_decode(data))
        return results

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
                subprocess.run([self._embedded, "pool", "down"], capture_output=True)
        return self.stats

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
