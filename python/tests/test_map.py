import pathlib

from conftest import run_script

HERE = pathlib.Path(__file__).resolve().parent


def test_the_readme_example_maps_1000_inputs_in_order(embedded_pool, tmp_path):
    script = HERE.parent / "examples" / "squares.py"
    text = script.read_text()
    assert len([line for line in text.splitlines() if line.strip()]) <= 10
    assert text.strip() in (HERE.parent / "README.md").read_text(), "README shows another example"
    out = run_script(script, embedded_pool, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{sum(i * i for i in range(1000))} from "), out.stdout


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
    import shutil

    from conftest import no_pool_env

    env = no_pool_env(tmp_path)
    # No `carmi` anywhere: the package starts the pool with the one it carries.
    env.pop("CARMI_BIN", None)
    path = [d for d in env.get("PATH", "").split(os.pathsep) if d]
    env["PATH"] = os.pathsep.join(d for d in path if not shutil.which("carmi", path=d))
    assert shutil.which("carmi", path=env["PATH"]) is None
    # The README's lines, then their results checked one by one, in order.
    script = tmp_path / "squares_in_order.py"
    example = (HERE.parent / "examples" / "squares.py").read_text()
    check = "assert squares == [i * i for i in range(1000)], squares\nprint('in order')\n"
    script.write_text(example + check)
    out = run_script(script, env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"{sum(i * i for i in range(1000))} "), out.stdout
    assert "in order" in out.stdout, out.stdout
    # The pool is down again: its record is gone or names a dead process.
    record = tmp_path / "state" / "carmi" / "pool-up.toml"
    assert not record.exists() or "pool_pid" not in record.read_text(), record.read_text()


def test_killing_a_worker_mid_map_loses_nothing(embedded_pool, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, str(HERE / "kill.py")],
        env=embedded_pool,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = tmp_path / "pids"
    deadline = time.time() + 300
    while not (pids.exists() and any(pids.iterdir())):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    victim = int(next(pids.iterdir()).name)
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    ok, delivered, copies = out.split()
    assert ok == "ok", out
    assert delivered == "30", out
    # The killed worker's step went out again.
    assert int(copies) > 30, out


def test_cycles_of_uneven_steps_on_a_churning_pool_deliver_every_step_once(tmp_path):
    import subprocess

    from conftest import carmi_command, no_pool_env

    env = no_pool_env(tmp_path)
    carmi = carmi_command()
    up = ["pool", "up", "--hosts", "8", "--owners", "stochastic", "--speedup", "600"]
    subprocess.run([*carmi, *up], env=env, check=True, timeout=120)
    try:
        out = run_script(HERE / "cycles.py", env, tmp_path)
    finally:
        subprocess.run([*carmi, "pool", "down"], env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cycle 7 ok" in out.stdout, out.stdout
    assert "delivered 248 " in out.stdout, out.stdout
    print(out.stdout)
