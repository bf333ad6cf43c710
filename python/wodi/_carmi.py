"""The ``carmi`` command carried in the package's native module, for a
machine where no ``carmi`` is installed: ``python -m wodi._carmi pool up``
is ``carmi pool up``. Its background pool runs as ``python -m wodi._carmi
pool serve``, with this same interpreter."""

import sys

from . import _native


def command():
    """The argument list that runs this ``carmi`` (``[python, -m, wodi._carmi]``)."""
    return [sys.executable, "-m", "wodi._carmi"]


def main():
    """Runs ``carmi`` with this process's arguments and exits with its status."""
    sys.exit(_native.carmi(["carmi", *sys.argv[1:]], command()))


if __name__ == "__main__":
    main()
