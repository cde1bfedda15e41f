"""The CLI's view of a long job's steps (`exporter.progress.Step`), on stderr so stdout keeps the
results: on a terminal a bar per stage (rich), elsewhere (logs, CI) one line per finished stage."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from exporter.progress import Step


class Shown:
    """A `Progress` to pass to the library, used as a context manager around the job."""

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None):
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._bars = None
        self._tasks: dict[tuple[str, str, str], int] = {}
        self._started = time.monotonic()

    def __enter__(self) -> Shown:
        if self.terminal:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
                                  console=Console(file=self.stream, force_terminal=True), transient=False)
            self._bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bars is not None:
            self._bars.stop()

    def __call__(self, step: Step) -> None:
        key = (step.job, step.subject, step.stage)
        if self._bars is not None:
            if key not in self._tasks:
                self._tasks[key] = self._bars.add_task(f"{step.job} {step.subject}: {step.stage}",
                                                       total=step.total, unit=step.unit)
            self._bars.update(self._tasks[key], completed=step.done, total=step.total)
        elif step.finished:
            print(line(step, time.monotonic() - self._started), file=self.stream, flush=True)


def line(step: Step, elapsed: float) -> str:
    """`[  2.4 s] export tables/events: commits rewritten 40/40 versions`: `elapsed` since the job began."""
    return f"[{elapsed:5.1f} s] {step.job} {step.subject}: {step.stage} {step.done}/{step.total} {step.unit}"
