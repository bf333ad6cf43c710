import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def embedded_pool(tmp_path_factory):
    """An embedded pool (`carmi pool up`) that the scripts find as `carmi` does."""
    carmi = os.environ.get("CARMI_BIN", str(ROOT / "target" / "debug" / "carmi"))
    state = tmp_path_factory.mktemp("state")
    env = dict(os.environ, XDG_STATE_HOME=str(state), HOME=str(state))
    for k in ("CARMI_POOL", "CARMI_SECRET", "CARMI_LOCAL", "CARMI_SECRET_FILE", "CARMI_CONFIG"):
        env.pop(k, None)
    subprocess.run([carmi, "pool", "up", "--hosts", "4"], env=env, check=True, timeout=120)
    try:
        yield env
    finally:
        subprocess.run([carmi, "pool", "down"], env=env, timeout=120)


def run_script(path, env, cwd):
    return subprocess.run(
        [sys.executable, str(path)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
