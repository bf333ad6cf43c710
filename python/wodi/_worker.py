"""The worker side of Python steps: the init data, and the serving loop of
the generic worker ``python -m wodi._pyworker`` that ``wodi.Executor``
runs on the pool's hosts."""

from __future__ import annotations

import pickle
from typing import Any, Callable

from . import _codec, _native

_NO_INIT = object()
_init: Any = _NO_INIT


def init_data() -> Any:
    """The init data this worker was given (None without any)."""
    return None if _init is _NO_INIT else _init


def set_init(value: Any) -> None:
    """Records the init data ``init_data`` returns."""
    global _init
    _init = value


def load_executor_init(data: bytes) -> None:
    """An executor's init message: its ``init`` data, then its
    ``initializer(*initargs)``, run once before this worker's first call."""
    init, initializer, initargs = pickle.loads(data)
    set_init(init)
    if initializer is not None:
        initializer(*initargs)


def serve(load_init: Callable[[bytes], None]) -> None:
    """Serves Python steps (``_codec.run_step``) until the run ends."""
    _native.serve_worker(_codec.run_step, load_init)
