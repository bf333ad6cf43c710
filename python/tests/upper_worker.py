"""A worker command for commands.py: upper-cases each input, after the init data."""

import wodi


def step(data):
    return wodi.init_data() + data.upper()


wodi.serve(step)
raise SystemExit("wodi.serve returned: this script must be started by WoDi as a worker")
