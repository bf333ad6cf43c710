"""The WoDi server role, started by a Python master as ``python -m wodi._server``."""

from . import _native

if __name__ == "__main__":
    _native.server_main()
