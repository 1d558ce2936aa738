"""Progress of a grading run: a bar on a terminal, one line per finished submission elsewhere.

On a terminal: ``grading  37/200 [04:10<18:25, 6.6 s/submission] 1 failed``, tqdm's bar with the
failures so far and an ETA. In CI or a log file (not a terminal): one line per finished submission,
``[37/200] alice/lab01-text-to-tensors 45/50 (90%) 12.3 s on tcp://10.0.0.7:40121; 1 failed so far;
ETA 18m25s``, so the log says what happened and in what order, and never sits silent.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class Progress:
    """Counts finished submissions of ``total``; ``finished`` after each, ``close`` at the end."""

    def __init__(self, total: int, *, stream: TextIO | None = None, terminal: bool | None = None,
                 label: str = "grading"):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.started = time.monotonic()
        self.bar = None
        if self.terminal and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="submission", file=self.stream, dynamic_ncols=True)

    def eta(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def finished(self, student: str, lab: str, outcome: str, *, failed: bool = False, elapsed: float | None = None,
                 worker: str | None = None) -> None:
        """One submission is done: ``outcome`` is its score ("45/50 (90%)") or why it failed."""
        self.done += 1
        self.failed += bool(failed)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(f"{self.failed} failed" + (f" · last: {student}" if not failed else
                                                                 f" · {student}/{lab} failed"))
            return
        where = f" on {worker}" if worker else ""
        took = f" {elapsed:.1f} s" if elapsed is not None else ""
        eta = self.eta()
        tail = f"; {self.failed} failed so far" + (f"; ETA {format_duration(eta)}" if eta is not None else "")
        print(f"[{self.done}/{self.total}] {student}/{lab} {outcome}{took}{where}{tail}", file=self.stream,
              flush=True)

    def note(self, message: str) -> None:
        """A line that must be seen now (a worker lost, a folder that changed), above the bar if there is one."""
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
