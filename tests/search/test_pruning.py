"""Median rule and successive halving."""

from __future__ import annotations

import pytest

from diel.errors import ConfigError
from diel.search.protocol import STOP
from diel.search.schedulers import HalvingPruner, MedianPruner, Pruner, parse_pruner


def finished(pruner, trial, scores):
    for epoch, score in enumerate(scores, start=1):
        assert not pruner.should_prune(trial, epoch, score)
    pruner.finish(trial, ok=True)


def test_median_rule_needs_min_trials_and_warmup():
    p = MedianPruner(min_trials=2, warmup_epochs=1)
    finished(p, 0, [0.5, 0.6, 0.7])
    assert not p.should_prune(9, 2, 0.0)  # only one finished trial so far
    finished(p, 1, [0.5, 0.8, 0.9])
    assert not p.should_prune(2, 1, 0.0)  # warm-up epoch
    assert p.should_prune(2, 2, 0.69)  # median at epoch 2 is 0.7
    assert not p.should_prune(3, 2, 0.7)
    assert not p.should_prune(3, 4, 0.0)  # no finished trial reached epoch 4


def test_failed_or_pruned_trials_do_not_count_for_the_median():
    p = MedianPruner(min_trials=1, warmup_epochs=0)
    p.should_prune(0, 1, 0.9)
    p.finish(0, ok=False)
    assert not p.should_prune(1, 1, 0.1)


def test_halving_keeps_top_fraction_at_each_rung():
    p = HalvingPruner(min_epochs=1, eta=2)
    assert [e for e in range(1, 10) if p.is_rung(e)] == [1, 2, 4, 8]
    assert not p.should_prune(0, 1, 0.5)  # first at the rung always continues
    assert p.should_prune(1, 1, 0.4)  # 2 at the rung, keep 1: 0.5 is better
    assert not p.should_prune(2, 1, 0.6)
    assert not p.should_prune(2, 3, 0.0)  # not a rung
    assert not p.should_prune(3, 1, 0.55)  # 4 at the rung, keep 2: 0.6, 0.55
    assert p.should_prune(4, 1, 0.45)


def test_parse_pruner():
    assert parse_pruner(None, "p") == (None, {})
    assert parse_pruner("none", "p") == (None, {})
    pruner, options = parse_pruner({"median": {"min_trials": 5, "metric": "loss"}}, "p")
    assert isinstance(pruner, MedianPruner) and pruner.min_trials == 5
    assert options["metric"] == "loss"
    assert isinstance(parse_pruner("halving", "p")[0], HalvingPruner)
    for spec, path in [("hyperbnd", "p"), ({"median": {"min_trial": 1}}, "p.median.min_trial"),
                       ({"halving": {"eta": 1}}, "p.halving.eta"), ([1], "p"),
                       ({"median": 3}, "p.median")]:
        with pytest.raises(ConfigError) as info:
            parse_pruner(spec, "p")
        assert info.value.path == path


def test_the_pruner_sees_every_epoch_live_as_on_replay():
    """After a prune order the trial may report more epochs before it stops; the pruner is
    still shown them (its answer ignored, one order only), as a resumed study's replay
    of the stored epochs will show them."""
    from dataclasses import replace

    from diel.results import StudyState
    from diel.search import parse_settings
    from diel.search.engine import SearchEngine

    seen = []

    class Always(Pruner):
        def should_prune(self, trial: int, epoch: int, score: float) -> bool:
            seen.append((trial, epoch))
            return True

        def finish(self, trial: int, ok: bool) -> None:
            pass

    settings = parse_settings({"space": {"x": {"values": [1]}}, "pruner": "median"}, "search")
    engine = SearchEngine(replace(settings, pruner=Always()), StudyState(1, [], [], {}), seed=1)
    number = engine.next_trial().number
    orders = [engine.on_epoch({"trial": number, "epoch": epoch, "metrics": {"accuracy": 0.1}})[1]
              for epoch in (1, 2, 3)]
    assert orders == [STOP, None, None]
    assert seen == [(number, 1), (number, 2), (number, 3)]
