"""``pruner: {demo: {at: E}}``: every trial is stopped at epoch ``E``, an answer no
builtin scheduler gives, so a test can tell this scheduler was used."""

from __future__ import annotations

from diel.checks import whole_number
from diel.search.schedulers import Decision, Scheduler, check_option_names


class DemoScheduler(Scheduler):
    """Answers stop at epoch ``at``, continue before it."""

    def __init__(self, at: int = 3) -> None:
        self.at = at

    @classmethod
    def from_options(cls, name, options, path) -> "DemoScheduler":
        check_option_names(options, ("at",), path)
        return cls(whole_number(options.get("at", 3), f"{path}.at", 1))

    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        return Decision.stop() if epoch >= self.at else Decision.continue_()
