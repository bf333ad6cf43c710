import io
import pathlib

import pytest

from conftest import run_script

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def calls(embedded_pool, tmp_path_factory):
    """One run of executor_calls.py (an executor's start costs seconds)."""
    out = run_script(HERE / "executor_calls.py", embedded_pool, tmp_path_factory.mktemp("calls"))
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def line(out, start):
    found = [ln + " " for ln in out.stdout.splitlines() if (ln + " ").startswith(start + " ")]
    assert found, f"no line {start!r} in:\n{out.stdout}\n{out.stderr}"
    return found[0][len(start) + 1:].rstrip(" ")


def test_an_executor_drives_1000_futures_with_as_completed_and_wait(calls):
    assert line(calls, "as_completed") == "1000 True"
    assert line(calls, "wait") == "20 0"


def test_lambdas_closures_and_the_scripts_classes_run_on_the_workers(calls):
    assert line(calls, "lambda") == "42 True"
    assert line(calls, "closure") == "105 True"
    assert line(calls, "class") == "2 1"
    assert line(calls, "kwargs") == "255"
    assert line(calls, "workers") == "True"


def test_a_raising_call_raises_its_exception_with_the_remote_traceback(calls):
    assert line(calls, "raised") == "no square for -7 RemoteTraceback"
    assert line(calls, "remote frame") == "True"
    assert line(calls, "printed with cause") == "True"


def test_map_keeps_order_across_iterables_and_chunks_and_raises_in_place(calls):
    assert line(calls, "map") == str([i * i for i in range(10)])
    assert line(calls, "map2") == str([i**3 for i in range(5)])
    assert line(calls, "chunks") == "True"
    assert line(calls, "map raised after") == "[2, 5]"


def test_asyncio_awaits_results(calls):
    assert line(calls, "asyncio") == "True 144"


def test_init_data_and_the_initializer_reach_each_worker(calls):
    assert line(calls, "init") == "3 ready"


def test_calls_not_started_are_cancelled_and_never_run(calls):
    assert line(calls, "cancel running") == "False"
    assert line(calls, "cancel queued") == "[True, True, True]"
    assert line(calls, "first") == "released"
    assert line(calls, "rest") == "True"
    assert line(calls, "cancelled") == "[True, True, True, False, False] ['3', '4']"


def test_a_map_given_up_cancels_its_calls_not_started(calls):
    assert line(calls, "gave up map") == ""
    assert line(calls, "blocker") == "released"
    # Its marks are absent from the directory listed after shutdown below.


def test_shutdown_cancels_what_has_not_started_finishes_the_rest_and_refuses_more(calls):
    assert line(calls, "shutdown") == "released [True, True, True] ['3', '4']"
    assert line(calls, "after shutdown") == "cannot schedule new calls after shutdown"
    # read_init, first, the two marks, the blocker, slow: the cancelled calls (and
    # the given-up map's) never reached the pool.
    assert line(calls, "stats") == "6"


def test_a_plain_script_shows_no_progress(calls):
    assert "calls done" not in calls.stderr, calls.stderr


def test_progress_as_text_counts_calls_and_failures():
    from wodi import _progress

    stream = io.StringIO()
    progress = _progress.Progress("text", stream)
    progress.submitted(3)
    progress.finished(True)
    progress.finished(False)
    progress.finished(True)
    progress.close()
    assert stream.getvalue().rstrip().endswith("wodi: 3/3 calls done, 1 failed"), stream.getvalue()
    assert _progress.make(None) is None, "progress outside a notebook unless asked"
    assert _progress.make(True).kind == "text"


def test_progress_as_a_widget_when_ipywidgets_is_there():
    pytest.importorskip("ipywidgets")
    from wodi import _progress

    progress = _progress.Progress("widget")
    progress.submitted(5)
    for ok in (True, True, False):
        progress.finished(ok)
    progress.close()
    assert (progress._bar.value, progress._bar.max) == (3, 5)
    assert progress._label.value == "3/5 calls, 1 failed"
    assert progress._bar.bar_style == "danger"


def test_help_shows_the_executors_docstrings():
    import concurrent.futures
    import pydoc

    import wodi

    assert issubclass(wodi.Executor, concurrent.futures.Executor)
    text = pydoc.render_doc(wodi.Executor, renderer=pydoc.plaintext)
    for words in ("concurrent.futures.Executor", "cloudpickle", "chunksize", "cancel_futures"):
        assert words in text, words
    assert (pathlib.Path(wodi.__file__).parent / "py.typed").exists()
    assert (pathlib.Path(wodi.__file__).parent / "_native.pyi").exists()


def test_prefetch_adapts_by_default_and_a_fixed_one_must_be_positive():
    import inspect

    import wodi
    from wodi import _launch

    # The default adapts between one step and the most a worker may hold.
    assert inspect.signature(wodi.Executor).parameters["prefetch"].default is None
    assert inspect.signature(wodi.Pool).parameters["prefetch"].default is None
    assert _launch.prefetch_range(None) == (1, _launch.PREFETCH_MAX)
    assert _launch.PREFETCH_MAX > 1
    assert _launch.prefetch_range(3) == (3, 3)
    # Refused before any pool is started.
    with pytest.raises(ValueError, match="prefetch"):
        wodi.Executor(max_workers=1, prefetch=0)
