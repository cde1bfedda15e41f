"""How far a long job has come, for whoever runs it: the library reports steps, its callers show them
(the CLI as bars on a terminal and a line per finished step elsewhere; workers and the API not at all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """`done` of `total` `unit` of one stage of a job on one subject: ("export", "tables/events",
    "commits rewritten", 12, 40, "versions"); `total` None while not known. A stage reported with
    `done == total` is finished."""

    job: str
    subject: str
    stage: str
    done: int
    total: int | None
    unit: str

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done >= self.total


Progress = Callable[[Step], None]


def quiet(step: Step) -> None:
    """The default: nobody is watching."""


def counted(progress: Progress, job: str, subject: str, stage: str, total: int, unit: str,
            every: int = 1) -> Callable[[int], None]:
    """A counter for one stage: call it with how many more are done; it reports every `every`th and
    the last. A stage of nothing is reported finished at once."""
    done = 0
    if total == 0:
        progress(Step(job, subject, stage, 0, 0, unit))

    def advance(more: int = 1) -> None:
        nonlocal done
        before, done = done, done + more
        if done >= total or done // every != before // every:
            progress(Step(job, subject, stage, min(done, total), total, unit))

    return advance


def each(items: Iterable, advance: Callable[[int], None]) -> Iterator:
    """The items, with `advance(1)` once each one's work is done (when the next one is asked for)."""
    for item in items:
        yield item
        advance(1)
