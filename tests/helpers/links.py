"""A trial's link to the search for runner tests: a real TrialLink over a FakeSpace,
whose report answers may be scripted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from diel.search.protocol import report_tag
from diel.worker.link import RankWriter, TrialLink
from diel.worker.trial import order_of
from tests.helpers.fakespace import FakeSpace


class ScriptedLink(TrialLink):
    """Trial ``number`` of study ``s`` over ``space`` (a new :class:`FakeSpace` by default);
    ``answer(step, metrics)`` (True: prune, "pause", False: go) stands in for the master's
    order when given; ``folder``: the study's checkpoint folder of a rank writer."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], Any] | None = None,
                 folder: Path | None = None, number: int = 0,
                 space: FakeSpace | None = None) -> None:
        super().__init__(space or FakeSpace(), "s", 0, number, time.perf_counter(),
                         RankWriter(folder) if folder is not None else None)
        self.answer = answer

    def report(self, step: int, metrics: dict[str, Any]) -> str:
        order = super().report(step, metrics)
        return order_of(self.answer(step, metrics)) if self.answer is not None else order

    def reports(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The reports put so far, in order (of one ``kind`` when given)."""
        return [value for tag, value in self.space.log
                if tag == report_tag("s") and (kind is None or value["kind"] == kind)]


def scripted(answer: Callable[[int, dict[str, Any]], Any]) -> ScriptedLink:
    """A link whose reports ``answer`` answers."""
    return ScriptedLink(answer)
