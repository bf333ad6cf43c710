"""An executor in a real Jupyter kernel: lambdas of the notebook run on the
workers, and progress shows as an ipywidgets bar that counts the calls; a
Pool (whose workers rerun the script) refuses with what to use instead."""

import pytest

CELL = """
import wodi
def square(x):
    return x * x
with wodi.Executor(max_workers=2) as ex:
    squares = list(ex.map(square, range(200)))
    plus = [ex.submit(lambda x: x + 1, i) for i in range(50)]
    print(sum(squares), sum(f.result() for f in plus))
"""


def test_a_notebook_shows_a_progress_bar_and_runs_its_lambdas(embedded_pool, tmp_path):
    pytest.importorskip("ipywidgets")
    manager = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    km, kc = manager.start_new_kernel(kernel_name="python3", env=embedded_pool, cwd=str(tmp_path))
    messages = []
    pool_messages = []
    try:
        reply = kc.execute_interactive(CELL, timeout=600, output_hook=messages.append)
        kc.execute_interactive("import wodi; wodi.Pool()", timeout=600,
                               output_hook=pool_messages.append)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", messages
    text = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert f"{sum(i * i for i in range(200))} {sum(range(1, 51))}" in text, text
    shown = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
    assert any("application/vnd.jupyter.widget-view+json" in d for d in shown), shown
    states = [m["content"]["data"].get("state", {}) for m in messages if m["msg_type"] == "comm_msg"]
    values = [s["value"] for s in states if isinstance(s.get("value"), int)]
    assert values and values[-1] == 250, states
    # A Pool, whose workers rerun the script, says what to use instead.
    errors = [m["content"] for m in pool_messages if m["msg_type"] == "error"]
    assert errors and "use wodi.Executor" in errors[0]["evalue"], pool_messages
