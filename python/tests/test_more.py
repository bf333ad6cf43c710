import pathlib

from conftest import run_script

HERE = pathlib.Path(__file__).resolve().parent


def test_workers_that_run_a_command_get_bytes_and_init_data(embedded_pool, tmp_path):
    out = run_script(HERE / "commands.py", embedded_pool, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shell [b'one\\n', b'5\\n', b'x']" in out.stdout, out.stdout
    assert "shell failed 1 echo broken >&2; exit 3 True" in out.stdout, out.stdout
    assert "script [b'PREFIX:A', b'PREFIX:BC', b'PREFIX:D']" in out.stdout, out.stdout


def test_init_data_and_results_streamed_as_they_come(embedded_pool, tmp_path):
    out = run_script(HERE / "streaming.py", embedded_pool, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "map [10, 20, 30]" in out.stdout, out.stdout
    assert "unordered True" in out.stdout, out.stdout
    assert "then failed -1 [(3, 30), (5, 50)]" in out.stdout, out.stdout
    assert "after [70]" in out.stdout, out.stdout
    # The master saw the first result while the second step still ran.
    assert "streamed ['first', 'went']" in out.stdout, out.stdout
    assert "delivered 24" in out.stdout, out.stdout
