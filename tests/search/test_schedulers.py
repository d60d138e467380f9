"""The scheduler contract: decisions, schedulers found through the entry-point group
diel.schedulers with options checked by their class, answers this diel cannot carry out
refused before anything runs, and the engine carrying out the answers."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace

import pytest

from diel.checks import whole_number
from diel.errors import ConfigError
from diel.results import StudyState
from diel.search import parse_settings
from diel.search.engine import SearchEngine
from diel.search.protocol import STOP
from diel.search.schedulers import GROUP, Action, Decision, Scheduler, check_option_names, \
    parse_pruner

P = "modules.search.settings"
SPACE = {"x": {"values": [1, 2, 3]}}


class StopAt(Scheduler):
    """Stops every trial at epoch ``at`` (an option)."""

    def __init__(self, at: int) -> None:
        self.at = at

    @classmethod
    def from_options(cls, name, options, path):
        check_option_names(options, ("at",), path)
        return cls(whole_number(options.get("at", 2), f"{path}.at", 1))

    def decide(self, trial, epoch, score):
        return Decision.stop() if epoch == self.at else Decision.continue_()


class Population(StopAt):
    actions = frozenset({Action.CONTINUE, Action.STOP, "teleport"})   # not diel's


class NoOptions(Scheduler):
    def decide(self, trial, epoch, score):
        return Decision.continue_()


class Entry:
    """An installed entry point as importlib.metadata gives it."""

    def __init__(self, name: str, target: object) -> None:
        self.name, self.value, self.target = name, f"plugins:{name}", target

    def load(self) -> object:
        return self.target


@pytest.fixture
def installed(monkeypatch):
    """diel's schedulers plus StopAt as ``stop_at``, Population as ``pbt`` and NoOptions
    as ``plain``."""
    installed = importlib.metadata.entry_points
    extra = [Entry("stop_at", StopAt), Entry("pbt", Population), Entry("plain", NoOptions)]

    def entry_points(group):
        return [*installed(group=group), *(extra if group == GROUP else ())]
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_decisions_are_one_of_a_closed_set():
    assert Decision.continue_() == Decision(Action.CONTINUE)
    assert Decision.stop().action is Action.STOP and Decision.pause().action is Action.PAUSE
    exploit = Decision.exploit(3, {"lr": 0.1})
    assert (exploit.action, exploit.donor, exploit.params) == (Action.EXPLOIT, 3, {"lr": 0.1})
    with pytest.raises(ValueError, match="an exploit decision carries a donor"):
        Decision(Action.EXPLOIT)
    with pytest.raises(ValueError, match="no other does"):
        Decision(Action.STOP, donor=3)
    with pytest.raises(TypeError, match="is an Action"):
        Decision("stop")


def test_a_scheduler_from_an_entry_point_checks_its_own_options(installed):
    scheduler, options = parse_pruner({"stop_at": {"at": 4, "metric": "loss"}}, "p")
    assert isinstance(scheduler, StopAt) and scheduler.at == 4 and options["metric"] == "loss"
    with pytest.raises(ConfigError) as info:
        parse_pruner({"stop_at": {"at": 0}}, "p")
    assert (info.value.path, info.value.message) == ("p.stop_at.at", "expected an integer >= 1; got 0")
    with pytest.raises(ConfigError) as info:
        parse_pruner({"stop_at": {"a": 3}}, "p")
    assert (info.value.path, info.value.message) == (
        "p.stop_at.a", "unknown option (did you mean 'at'?); known: at, metric, direction")
    with pytest.raises(ConfigError) as info:
        parse_pruner({"plain": {"patience": 3}}, "p")
    assert (info.value.path, info.value.message) == (
        "p.plain.patience", "unknown option; known: metric, direction")
    assert isinstance(parse_pruner({"plain": {"direction": "minimize"}}, "p")[0], NoOptions)


def test_an_unknown_scheduler_lists_the_installed_ones(installed):
    with pytest.raises(ConfigError) as info:
        parse_pruner("stop_a", "p")
    assert info.value.message == ("unknown pruner (did you mean 'stop_at'?); known: halving, "
                                  "hyperband, median, pbt, plain, stop_at, none")
    with pytest.raises(ConfigError, match="expected none, halving, hyperband, median, pbt, "
                                          "plain, stop_at, or a mapping"):
        parse_pruner(["median"], "p")


def test_a_scheduler_that_may_answer_what_diel_cannot_do_is_refused_before_anything_runs(
        installed):
    with pytest.raises(ConfigError) as info:
        parse_settings({"space": SPACE, "pruner": "pbt"}, P)
    assert info.value.path == f"{P}.pruner"
    assert info.value.message.startswith("scheduler pbt may 'teleport' a trial, which this "
                                         "diel cannot yet do")


def engine_with(scheduler: Scheduler) -> SearchEngine:
    settings = parse_settings({"space": SPACE, "pruner": "median"}, P)
    return SearchEngine(replace(settings, pruner=scheduler), StudyState(1, [], [], {}), seed=1)


def report(number: int, epoch: int) -> dict:
    return {"trial": number, "epoch": epoch, "metrics": {"accuracy": 0.5}}


def test_the_engine_orders_a_stop_when_its_scheduler_answers_stop():
    engine = engine_with(StopAt(2))
    number = engine.next_trial().number
    assert [engine.on_epoch(report(number, epoch))[1] for epoch in (1, 2, 3)] == \
        [None, STOP, None]


def test_an_answer_this_diel_cannot_carry_out_stops_the_master_with_its_name():
    class Sneaky(StopAt):   # declares continue and stop, answers pause
        def decide(self, trial, epoch, score):
            return Decision.pause()
    engine = engine_with(Sneaky(2))
    number = engine.next_trial().number
    with pytest.raises(TypeError, match="scheduler Sneaky answered Decision.*PAUSE"):
        engine.on_epoch(report(number, 1))
