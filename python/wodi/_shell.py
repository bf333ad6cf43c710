"""The shell command worker (``wodi.SHELL``): each step's input is a command
line run by ``sh -c``; its standard output is the result."""

from . import _native

if __name__ == "__main__":
    _native.serve_commands()
