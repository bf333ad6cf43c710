import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def carmi_command():
    """The `carmi` the tests start pools with: $CARMI_BIN if set, else the
    one the installed package carries (`python -m wodi._carmi`)."""
    carmi = os.environ.get("CARMI_BIN")
    return [carmi] if carmi else [sys.executable, "-m", "wodi._carmi"]


def no_pool_env(tmp_path):
    """This environment with no pool configured: no CARMI_* coordinates, a
    state and home directory of its own (no `carmi pool up` record, no
    config file)."""
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, XDG_STATE_HOME=str(state), HOME=str(state))
    for k in ("CARMI_POOL", "CARMI_SECRET", "CARMI_LOCAL", "CARMI_SECRET_FILE", "CARMI_CONFIG"):
        env.pop(k, None)
    return env


@pytest.fixture(scope="session")
def embedded_pool(tmp_path_factory):
    """An embedded pool (`carmi pool up`) that the scripts find as `carmi` does."""
    carmi = carmi_command()
    state = tmp_path_factory.mktemp("state")
    env = dict(os.environ, XDG_STATE_HOME=str(state), HOME=str(state))
    for k in ("CARMI_POOL", "CARMI_SECRET", "CARMI_LOCAL", "CARMI_SECRET_FILE", "CARMI_CONFIG"):
        env.pop(k, None)
    subprocess.run([*carmi, "pool", "up", "--hosts", "4"], env=env, check=True, timeout=120)
    try:
        yield env
    finally:
        subprocess.run([*carmi, "pool", "down"], env=env, timeout=120)


def run_script(path, env, cwd):
    return subprocess.run(
        [sys.executable, str(path)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
