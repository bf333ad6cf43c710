"""Progress of an executor's calls: a progress bar widget in a notebook
with ``ipywidgets``, a line of text otherwise (a notebook's output, or
standard error), nothing unless asked outside a notebook."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

# Redrawing more often than this only costs the calls' own time.
_INTERVAL = 0.2


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and hasattr(shell, "kernel")


class Progress:
    """Calls done out of calls submitted, drawn at most five times a
    second and once more at ``close``. ``kind`` is ``"widget"`` (an
    ``ipywidgets`` bar), ``"notebook"`` (text in a notebook cell's output)
    or ``"text"`` (a line rewritten on ``stream``, standard error by
    default)."""

    def __init__(self, kind: str, stream: Optional[TextIO] = None) -> None:
        self.kind = kind
        self.done = 0
        self.failed = 0
        self.total = 0
        self._stream = stream
        self._drawn_at = 0.0
        self._bar: Any = None
        self._label: Any = None
        self._handle: Any = None
        if kind == "widget":
            import ipywidgets
            from IPython.display import display

            self._bar = ipywidgets.IntProgress(value=0, min=0, max=1, description="wodi")
            self._label = ipywidgets.Label(value="")
            display(ipywidgets.HBox([self._bar, self._label]))
        elif kind == "notebook":
            from IPython.display import display

            self._handle = display(self.text(), display_id=True)

    def text(self) -> str:
        """The progress as one line of text."""
        failed = f", {self.failed} failed" if self.failed else ""
        return f"wodi: {self.done}/{self.total} calls done{failed}"

    def submitted(self, n: int) -> None:
        """``n`` more calls were submitted."""
        self.total += n
        self._maybe_draw()

    def finished(self, ok: bool) -> None:
        """A call finished (or failed, or was cancelled)."""
        self.done += 1
        if not ok:
            self.failed += 1
        self._maybe_draw()

    def _maybe_draw(self) -> None:
        now = time.monotonic()
        if now - self._drawn_at >= _INTERVAL or self.done == self.total:
            self._drawn_at = now
            self.draw()

    def draw(self) -> None:
        """Shows the current counts."""
        if self.kind == "widget":
            self._bar.max = max(self.total, 1)
            self._bar.value = self.done
            self._bar.bar_style = "danger" if self.failed else (
                "success" if self.done == self.total else "")
            self._label.value = f"{self.done}/{self.total} calls" + (
                f", {self.failed} failed" if self.failed else "")
        elif self.kind == "notebook":
            self._handle.update(self.text())
        else:
            stream = self._stream or sys.stderr
            stream.write("\r" + self.text())
            stream.flush()

    def close(self) -> None:
        """Draws the final counts (and ends the text line)."""
        self.draw()
        if self.kind == "text":
            (self._stream or sys.stderr).write("\n")


def make(progress: Any) -> Optional[Progress]:
    """The display ``Executor(progress=...)`` asks for: None (the default)
    shows progress in a notebook only; True shows it anywhere; False
    never; a ``Progress`` is used as it is."""
    if isinstance(progress, Progress):
        return progress
    notebook = in_notebook()
    if progress is False or (progress is None and not notebook):
        return None
    if notebook:
        try:
            import ipywidgets  # noqa: F401

            return Progress("widget")
        except ImportError:
            return Progress("notebook")
    return Progress("text")
