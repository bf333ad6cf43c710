"""Starting a run: the worker script the pool runs, and the embedded pool
started when none is configured (shared by ``Pool`` and ``Executor``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple

PREFETCH_MAX = 16
"""The most steps a worker holds under the adaptive default
(``prefetch=None``): enough to hide a round trip to the server of a few
hundred microseconds behind calls of tens of microseconds."""


def prefetch_range(prefetch: Optional[int]) -> Tuple[int, int]:
    """``(prefetch, prefetch_max)`` for the native pool: ``None`` adapts
    (the server gives a worker one step while its steps are long against
    the round trip to it, up to ``PREFETCH_MAX`` while they are short); a
    number fixes the steps each worker holds."""
    if prefetch is None:
        return 1, PREFETCH_MAX
    if prefetch < 1:
        raise ValueError("prefetch must be at least 1 (or None: adaptive)")
    return prefetch, prefetch


def quote(s: str) -> str:
    """``s`` quoted for ``sh``."""
    return "'" + s.replace("'", "'\\''") + "'"


def worker_script(command: Sequence[str]) -> str:
    """An executable that runs ``command`` (an argument list) from this
    directory with this interpreter's module path: the worker the pool
    runs (a file, since the pool stages an executable and runs it with
    arguments; a staged copy of the interpreter would lose its venv)."""
    fd, path = tempfile.mkstemp(prefix="wodi-worker-", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("#!/bin/sh\n")
        f.write(f"cd {quote(os.getcwd())}\n")
        f.write(f"PYTHONPATH={quote(os.pathsep.join(p or os.getcwd() for p in sys.path))} ")
        args = " ".join(quote(a) for a in command)
        f.write(f"exec {args} \"$@\"\n")
    os.chmod(path, stat.S_IRWXU)
    return path


def carmi_command() -> List[str]:
    """The ``carmi`` that starts and stops an embedded pool: ``$CARMI_BIN``
    if set, else the one this package carries (``python -m wodi._carmi``,
    built from the same sources as this module, so it speaks its protocol;
    a ``carmi`` on the PATH may be of another version and is not used)."""
    carmi = os.environ.get("CARMI_BIN")
    if carmi:
        return [carmi]
    from . import _carmi

    return _carmi.command()


def start_embedded_pool(hosts: int) -> List[str]:
    """No pool is configured: starts an embedded one on this machine with
    ``carmi pool up`` (see ``carmi_command``); returns the ``carmi``
    command that stops it (``stop_embedded_pool``)."""
    carmi = carmi_command()
    up = subprocess.run(
        [*carmi, "pool", "up", "--hosts", str(max(hosts, 1))], capture_output=True, text=True
    )
    if up.returncode != 0:
        raise RuntimeError(f"`carmi pool up` failed: {up.stderr.strip()}")
    return carmi


def stop_embedded_pool(carmi: Optional[List[str]]) -> None:
    """Stops the pool ``start_embedded_pool`` started (nothing for None)."""
    if carmi:
        subprocess.run([*carmi, "pool", "down"], capture_output=True)


def remove(path: str) -> None:
    """Removes a file this package made, if it is still there."""
    try:
        os.unlink(path)
    except OSError:
        pass
