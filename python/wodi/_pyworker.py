"""The generic Python worker ``wodi.Executor`` runs on the pool's hosts
(``python -m wodi._pyworker``): it needs nothing of the master's script,
whose functions and classes come by value."""

import sys

from wodi import _worker

if __name__ == "__main__":
    _worker.serve(_worker.load_executor_init)
    sys.exit(0)
