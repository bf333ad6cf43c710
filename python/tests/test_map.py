import pathlib

from conftest import run_script

HERE = pathlib.Path(__file__).resolve().parent


def test_the_readme_example_maps_1000_inputs_in_order(embedded_pool, tmp_path):
    script = HERE.parent / "examples" / "squares.py"
    assert len(script.read_text().strip().splitlines()) <= 10
    out = run_script(script, embedded_pool, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{sum(i * i for i in range(1000))} efficiency "), out.stdout


def test_a_step_that_raises_comes_back_naming_its_input(embedded_pool, tmp_path):
    out = run_script(HERE / "failing.py", embedded_pool, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "first [9, 1, 4]" in out.stdout, out.stdout
    assert "caught 1 -7" in out.stdout, out.stdout
    assert "step 1 failed on input -7" in out.stdout, out.stdout
    assert "ValueError: no square for -7" in out.stdout, out.stdout
    assert "after [25]" in out.stdout, out.stdout


def test_without_a_configured_pool_an_embedded_one_is_started_and_stopped(tmp_path):
    import os

    from conftest import ROOT

    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, XDG_STATE_HOME=str(state), HOME=str(state))
    for k in ("CARMI_POOL", "CARMI_SECRET", "CARMI_LOCAL", "CARMI_SECRET_FILE", "CARMI_CONFIG"):
        env.pop(k, None)
    env.setdefault("CARMI_BIN", str(ROOT / "target" / "debug" / "carmi"))
    out = run_script(HERE.parent / "examples" / "squares.py", env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{sum(i * i for i in range(1000))} "), out.stdout
    # The pool is down again: its record is gone or names a dead process.
    record = state / "carmi" / "pool-up.toml"
    assert not record.exists() or "pool_pid" not in record.read_text(), record.read_text()
