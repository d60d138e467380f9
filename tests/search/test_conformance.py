"""diel's own samplers and schedulers pass the conformance suites it ships
(diel.testing), as a third party's must."""

from __future__ import annotations

import itertools
import random

import pytest

from diel.search.samplers import Sampler
from diel.search.samplers.grid import GridSampler
from diel.search.samplers.optuna_based import CmaEsSampler, GPSampler, NSGAIISampler, \
    QMCSampler, TPESampler
from diel.search.samplers.random import RandomSampler
from diel.search.schedulers import Action, Decision, HalvingPruner, HyperbandPruner, \
    MedianPruner, Pruner
from diel.testing.samplers import SamplerSuite
from diel.testing.schedulers import SchedulerSuite
from tests.helpers.plugins import failing_checks


class TestGrid(SamplerSuite):
    sampler_class = GridSampler


class TestRandom(SamplerSuite):
    sampler_class = RandomSampler
    mode = "batch"


class TestTPE(SamplerSuite):
    sampler_class = TPESampler
    options = {"n_startup_trials": 4}


class TestGP(SamplerSuite):
    sampler_class = GPSampler
    options = {"n_startup_trials": 3}
    trials = 6


class TestCmaEs(SamplerSuite):
    sampler_class = CmaEsSampler
    options = {"popsize": 4}


class TestQMC(SamplerSuite):
    sampler_class = QMCSampler


class TestNSGA2(SamplerSuite):
    sampler_class = NSGAIISampler
    options = {"population_size": 4}
    directions = ("maximize", "minimize")


class TestMedian(SchedulerSuite):
    scheduler_class = MedianPruner
    options = {"min_trials": 2}


class TestHalving(SchedulerSuite):
    scheduler_class = HalvingPruner
    options = {"eta": 2}


class TestHyperband(SchedulerSuite):
    scheduler_class = HyperbandPruner
    options = {"max_epochs": 9}


# -- the suites fail a plug-in that breaks the contract ----------------------------------

class OutOfBounds(RandomSampler):
    def propose(self, number):
        return {**super().propose(number), "int": 99}


class ShortGrid(GridSampler):
    def propose(self, number):
        return None if number >= 3 else super().propose(number)


class Unseeded(Sampler):
    kinds = ("uniform",)

    def propose(self, number):
        return {"uniform": random.uniform(-1, 1)}


class Remembers(RandomSampler):
    """Draws from a counter shared by every instance: not rebuilt from restore alone."""
    counter = itertools.count(1000)

    def propose(self, number):
        return self.space.sample(self.seed, next(self.counter))


@pytest.mark.parametrize("plugin, failed", [
    (OutOfBounds, {"test_proposals_are_values_of_the_space": "int = 99"}),
    (ShortGrid, {"test_size_is_kept": "size() is 60 but 3 trials"}),
    (Unseeded, {"test_one_seed_gives_the_same_proposals": "proposed differently"}),
    (Remembers, {"test_one_seed_gives_the_same_proposals": "proposed differently",
                 "test_a_sampler_is_rebuilt_from_the_stored_trials_alone": "keep nothing"}),
])
def test_the_sampler_suite_fails_a_sampler_that_breaks_the_contract(plugin, failed):
    suite = type("TestBroken", (SamplerSuite,), {"sampler_class": plugin})
    found = failing_checks(suite)
    assert set(found) >= set(failed), found
    for check, words in failed.items():
        assert words in found[check], found[check]


class Pauses(Pruner):
    def should_prune(self, trial, epoch, score):
        return False

    def decide(self, trial, epoch, score):
        return Decision.pause() if epoch == 3 else Decision.continue_()


class Interleaved(Pruner):
    """Stops every trial once reports have come out of trial-number order: never when
    trials are shown one after the other, as a resumed study replays them."""

    def __init__(self):
        self.last, self.wrapped = -1, False

    def should_prune(self, trial, epoch, score):
        self.wrapped = self.wrapped or trial < self.last
        self.last = trial
        return self.wrapped


class Forgetful(MedianPruner):
    def finish(self, trial, ok):
        del self._curves[trial]   # a trial that never reported has no curve


class Declares(Pruner):
    actions = frozenset({Action.STOP})   # never continue

    def should_prune(self, trial, epoch, score):
        return False


@pytest.mark.parametrize("plugin, failed", [
    (Pauses, {"test_answers_are_declared_actions": "answered pause"}),
    (Interleaved, {"test_a_resumed_study_decides_as_the_live_run": "differently"}),
    (Declares, {"test_actions_are_declared_and_carried_out": "able to let a trial continue"}),
])
def test_the_scheduler_suite_fails_a_scheduler_that_breaks_the_contract(plugin, failed):
    suite = type("TestBroken", (SchedulerSuite,), {"scheduler_class": plugin})
    found = failing_checks(suite)
    assert set(found) >= set(failed), found
    for check, words in failed.items():
        assert words in found[check], found[check]


def test_the_scheduler_suite_calls_finish_for_a_trial_that_never_reported():
    suite = type("TestBroken", (SchedulerSuite,), {"scheduler_class": Forgetful})
    with pytest.raises(KeyError):
        suite().test_finish_is_taken_for_any_trial()
