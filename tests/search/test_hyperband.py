"""Asynchronous Hyperband: brackets, their shares, rungs within a bracket, isolation
between brackets, replay on resume, validation, and a whole search under mpiexec."""

from __future__ import annotations

import math

import pytest

import diel.results
from diel.cli import main
from diel.errors import ConfigError
from diel.search.schedulers import HyperbandPruner, parse_pruner
from tests.helpers.launch import run_diel, search_workflow


@pytest.mark.parametrize("low, high, eta", [(1, 27, 3), (1, 26, 3), (2, 54, 3), (1, 9, 2),
                                            (1, 2, 2), (3, 8, 3), (1, 1000, 4)])
def test_brackets_are_floor_log_eta_of_the_ratio_plus_one(low, high, eta):
    pruner = HyperbandPruner(min_epochs=low, max_epochs=high, eta=eta)
    expected = math.floor(math.log(high / low) / math.log(eta) + 1e-9) + 1
    assert len(pruner.brackets) == len(pruner.shares) == expected
    assert [b.min_epochs for b in pruner.brackets] == [low * eta ** b for b in range(expected)]


def test_bracket_shares_follow_li_et_al_and_every_cycle_has_them_exactly():
    pruner = HyperbandPruner(min_epochs=1, max_epochs=27, eta=3)
    assert pruner.shares == [27, 12, 6, 4]   # ceil(4 * 3**s / (s + 1)), s = 3 .. 0
    for start in (0, 100, 4903):
        brackets = [pruner.bracket(n) for n in range(start, start + 49)]
        assert [brackets.count(b) for b in range(4)] == [27, 12, 6, 4]
    assert sorted(set(pruner.bracket(n) for n in range(13))) == [0, 1, 2, 3]  # spread out


def test_the_bracket_depends_on_the_trial_number_alone():
    first, second = (HyperbandPruner(min_epochs=1, max_epochs=27, eta=3) for _ in range(2))
    for n in range(60):   # whatever the other has seen, the same answer
        first.should_prune(n, 1, 0.5)
    assert [first.bracket(n) for n in range(200)] == [second.bracket(n) for n in range(200)]


def numbers(pruner: HyperbandPruner, bracket: int, count: int) -> list[int]:
    """The first ``count`` trial numbers of ``bracket``."""
    return [n for n in range(1000) if pruner.bracket(n) == bracket][:count]


def test_a_bracket_halves_at_its_own_rungs_only():
    pruner = HyperbandPruner(min_epochs=1, max_epochs=27, eta=3)
    a, b, c, d = numbers(pruner, 1, 4)   # rungs 3 and 9
    assert not pruner.should_prune(b, 1, -5.0) and not pruner.should_prune(b, 2, -5.0)
    assert not pruner.should_prune(a, 3, 0.5)   # first at the rung
    assert pruner.should_prune(b, 3, 0.4)       # 2 at the rung, keep 1
    assert not pruner.should_prune(c, 3, 0.6)
    assert pruner.should_prune(d, 3, 0.55)      # 4 at the rung, keep 1 (4 // 3)
    assert not pruner.should_prune(d, 4, -5.0)  # not a rung
    assert not pruner.should_prune(a, 9, 0.9)
    assert pruner.should_prune(c, 9, 0.8)


def test_no_rung_at_or_past_max_epochs():
    pruner = HyperbandPruner(min_epochs=1, max_epochs=27, eta=3)
    best, worse = numbers(pruner, 0, 2)
    assert not pruner.should_prune(best, 27, 1.0) and not pruner.should_prune(worse, 27, 0.0)
    last = numbers(pruner, 3, 3)   # first rung 27 = max_epochs: never stopped
    assert not any(pruner.should_prune(n, e, -n) for n in last for e in range(1, 30))


def test_a_trial_is_compared_with_its_own_bracket_only():
    pruner = HyperbandPruner(min_epochs=1, max_epochs=27, eta=3)
    strong = numbers(pruner, 0, 3)
    for n in strong:   # bracket 0 has rungs 1, 3, 9: all three strong trials reach 3
        assert not pruner.should_prune(n, 1, 10.0) and not pruner.should_prune(n, 3, 10.0)
    weak, weaker = numbers(pruner, 1, 2)
    assert not pruner.should_prune(weak, 3, 0.1)   # last of 4 at rung 3 overall; first in its own
    assert pruner.should_prune(weaker, 3, 0.05)
    assert pruner.should_prune(numbers(pruner, 0, 4)[-1], 3, 9.0)   # bracket 0 unaffected by them


def test_a_resumed_study_replaying_its_trials_decides_as_the_live_run_would():
    """Live, trials report interleaved; a resumed study replays the stored epochs trial by
    trial (here in reverse): same brackets, same rung scores, so the same decisions."""
    live, replayed = (HyperbandPruner(min_epochs=1, max_epochs=9, eta=3) for _ in range(2))
    stored: dict[int, list[tuple[int, float]]] = {n: [] for n in range(12)}
    stopped: set[int] = set()
    for epoch in range(1, 10):   # every running trial reports epoch 1, then 2, ...
        for n in sorted(set(stored) - stopped):
            score = (1 + n % 5) * epoch
            stored[n].append((epoch, score))
            if live.should_prune(n, epoch, score):
                live.finish(n, ok=False)
                stopped.add(n)
    for n in sorted(stored, reverse=True):
        for epoch, score in stored[n]:
            replayed.should_prune(n, epoch, score)
        replayed.finish(n, ok=len(stored[n]) == 9)
    assert 0 < len(stopped) < 12
    for n in range(12, 40):
        for epoch in (1, 3):
            score = 2.5 * epoch + n % 3
            assert live.should_prune(n, epoch, score) == replayed.should_prune(n, epoch, score)


def test_parse_hyperband():
    pruner, options = parse_pruner({"hyperband": {"min_epochs": 2, "max_epochs": 54, "eta": 3,
                                                  "metric": "loss"}}, "p")
    assert isinstance(pruner, HyperbandPruner) and options["metric"] == "loss"
    assert (pruner.min_epochs, pruner.max_epochs, pruner.eta) == (2, 54, 3)
    assert parse_pruner({"hyperband": {"max_epochs": 9}}, "p")[0].shares == [9, 5, 3]


@pytest.mark.parametrize("spec, path, fragment", [
    ({"hyperband": {"max_epochs": 27, "eta": 1}}, "p.hyperband.eta", "integer >= 2; got 1"),
    ({"hyperband": {"max_epochs": 27, "eta": 2.5}}, "p.hyperband.eta", "integer >= 2; got 2.5"),
    ({"hyperband": {"max_epochs": 27, "etta": 3}}, "p.hyperband.etta", "did you mean 'eta'?"),
    ({"hyperband": {"min_epochs": 0, "max_epochs": 27}}, "p.hyperband.min_epochs", ">= 1; got 0"),
    ({"hyperband": {"max_epochs": True}}, "p.hyperband.max_epochs", "integer >= 2; got True"),
    ({"hyperband": {"min_epochs": 5, "max_epochs": 5}}, "p.hyperband.max_epochs",
     "expected an integer > min_epochs (5); got 5"),
    ("hyperband", "p.hyperband.max_epochs", "required"),
    ({"hyperbnd": {"max_epochs": 9}}, "p", "unknown pruner (did you mean 'hyperband'?)"),
])
def test_hyperband_mistakes_name_their_key(spec, path, fragment):
    with pytest.raises(ConfigError) as info:
        parse_pruner(spec, "p")
    assert info.value.path == path and fragment in info.value.message, info.value


EPOCHS = """\
import time


def objective(trial):
    quality = trial.params["quality"]
    for epoch in range(1, 10):
        time.sleep(0.05)
        if trial.report(epoch, accuracy=quality * epoch):
            break
    return {"accuracy": quality * epoch}
"""


def hyperband_workflow(tmp_path, pruner: str):
    (tmp_path / "epochs.py").write_text(EPOCHS)
    qualities = [round(0.9 - 0.1 * n, 1) for n in range(8)]   # trial n is worse than n - 1
    search = (f"      space: {{quality: {{values: {qualities}}}}}\n      mode: batch\n"
              f"      progress_interval: 3600\n      pruner: {pruner}")
    return search_workflow(tmp_path, search, "    function: worker\n    copies: 1\n"
                                             "    settings: {run: epochs.py:objective, isolate: false}")


def test_a_mistake_is_exit_2_with_the_full_key_path(tmp_path, capsys):
    path = hyperband_workflow(tmp_path, "{hyperband: {max_epochs: 9, eta: 1}}")
    assert main(["validate", str(path)]) == 2
    assert "modules.search.settings.pruner.hyperband.eta: expected an integer >= 2; got 1" \
        in capsys.readouterr().err


@pytest.mark.mpi
def test_a_search_prunes_each_bracket_at_its_own_rungs(tmp_path):
    """Trials 0..7 one at a time, each worse than the one before; brackets (1, 9, 3):
    0, 1, 0, 2, 0, 1, 0, 2 with first rungs 1, 3 and 9 (= max_epochs: none)."""
    path = hyperband_workflow(tmp_path, "{hyperband: {min_epochs: 1, max_epochs: 9, eta: 3}}")
    result = run_diel("run", str(path), n=3, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    with diel.results.open(tmp_path / "wf.db") as results:
        rows = {row["number"]: row for row in results.trials()}
    pruner = HyperbandPruner(min_epochs=1, max_epochs=9, eta=3)
    assert [pruner.bracket(n) for n in sorted(rows)] == [0, 1, 0, 2, 0, 1, 0, 2]
    status = {n: row["status"] for n, row in rows.items()}
    # 1 is the first of bracket 1 at rung 3, though worse there than 0 (bracket 0) was;
    # 3 and 7 are in the bracket that is never stopped, though 7 is the worst of all
    assert status == {0: "ok", 1: "ok", 2: "pruned", 3: "ok", 4: "pruned", 5: "pruned",
                      6: "pruned", 7: "ok"}, (status, result.stderr[-3000:])
    for n, row in rows.items():
        first_rung = pruner.brackets[pruner.bracket(n)].min_epochs
        if row["status"] == "pruned":   # stopped at its bracket's first rung itself
            assert row["epoch"] == first_rung, (n, row)
        else:
            assert row["epoch"] == 9, (n, row)
