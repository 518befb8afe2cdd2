"""Progress of long work (the sweep, the asv phase, collect, report): i/N, elapsed time and an ETA.

On a terminal (stderr is a tty) one line is redrawn in place, at most a few times a second. In a log or CI
(not a tty) nothing is redrawn: once the work has taken QUIET_S, a line at each tenth of the way and one at the
end, so a log says how far a night got without thousands of lines, and short work (an error, a small collect)
keeps its output to the lines it had. Standard library only: it runs everywhere convbench does.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

REDRAW_S = 0.2  # a terminal line is redrawn at most this often (the last step always)
MILESTONE = 10  # percent between two lines in a log
QUIET_S = 10.0  # in a log, work shorter than this says nothing


def clock_text(seconds: float) -> str:
    """0:07, 12:30, 1:02:03."""
    s = int(max(seconds, 0) + 0.5)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """One phase of ``total`` steps. ``step``/``update`` as work is done, ``finish`` at the end (or use ``with``).
    ``unit="%"``: the work reports a percentage (asv does), shown as such out of ``total=100``."""

    def __init__(self, what: str, total: int, *, unit: str = "", stream: TextIO | None = None,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        self.enabled = enabled  # False: counts, says nothing (a library call that no one watches)
        self.what, self.total, self.unit = what, max(int(total), 0), unit
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.clock = clock
        self.start = clock()
        self.done = 0
        self.note = ""
        self._drawn = False
        self._last_draw = -1e9
        self._next_milestone = MILESTONE
        self._finished = False
        self._said = False  # a milestone line was written (a log)

    def line(self) -> str:
        elapsed = self.clock() - self.start
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = ""
        if 0 < self.done < self.total:
            eta = f", ETA {clock_text(elapsed * (self.total - self.done) / self.done)}"
        done = f"{pct:.0f}%" if self.unit == "%" else f"{self.done}/{self.total} ({pct:.0f}%)"
        text = f"{self.what} {done}, {clock_text(elapsed)} elapsed{eta}"
        return f"{text}: {self.note}" if self.note else text

    def step(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note)

    def update(self, done: int, note: str = "") -> None:
        self.done = min(max(int(done), 0), self.total)
        self.note = note or self.note
        if self.tty:
            now = self.clock()
            if now - self._last_draw >= REDRAW_S or self.done == self.total:
                self._draw()
                self._last_draw = now
            return
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if pct >= self._next_milestone and self.done < self.total and self.clock() - self.start >= QUIET_S:
            self._write(self.line() + "\n")
            self._said = True
            self._next_milestone = (int(pct) // MILESTONE + 1) * MILESTONE

    def say(self, message: str) -> None:
        """A line of other output, kept clear of the progress line (which is redrawn under it)."""
        if self.tty and self._drawn:
            self._write("\r\x1b[K")
        self._write(message.rstrip("\n") + "\n")
        if self.tty and self._drawn:
            self._draw()

    def around(self, log: Callable[[str], None]) -> Callable[[str], None]:
        """``log``, wrapped so that its lines do not run into the progress line on a terminal."""
        if not self.tty:
            return log

        def wrapped(message: str) -> None:
            if self._drawn:
                self._write("\r\x1b[K")
            log(message)
            if self._drawn:
                self._draw()
        return wrapped

    def finish(self, note: str = "") -> None:
        if self._finished:
            return
        self._finished = True
        elapsed = clock_text(self.clock() - self.start)
        tail = f": {note}" if note else ""
        if self.tty:
            self.note = note or self.note
            self._draw()
            self._write("\n")
        elif self._said or self.clock() - self.start >= QUIET_S:
            done = "" if self.unit == "%" else f" {self.done}/{self.total} {self.unit}".rstrip()
            self._write(f"{self.what}:{done} done in {elapsed}{tail}\n")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self._write("\r\x1b[K" + self.line()[:max(width, 20)])
        self._drawn = True

    def _write(self, text: str) -> None:
        if not self.enabled:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or full stream must not end the work it reports on
            pass


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
