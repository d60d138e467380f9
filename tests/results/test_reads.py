"""What readers follow of a study beyond its trials, through Results' public methods
(the plot and the dashboard run no SQL of their own): stored settings, epoch reports
of some trials in one query, the trials that reported, worker copies, and one read
transaction for several reads (snapshot)."""

from __future__ import annotations

import threading

import pytest

import diel.results


def test_the_epochs_of_some_trials_or_all_in_order(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        every = results.epochs("grid")
        assert every == {0: {1: {"accuracy": 0.5}, 2: {"accuracy": 0.9}}}
        assert list(every[0]) == [1, 2]
        assert results.epochs("grid", [0, 1]) == every
        assert results.epochs("grid", [1, 2]) == {}        # trials that reported nothing
        assert results.epochs("grid", []) == {}
        assert results.epochs("loss") == {}
        assert results.reported("grid") == {0} and results.reported("loss") == set()
        with pytest.raises(ValueError, match="no study 'gird' in .*; its studies: grid, loss"):
            results.epochs("gird")


def test_a_studys_settings_and_worker_copies(shared_results_db):
    with diel.results.open(shared_results_db) as results:
        assert results.config("grid") == {"seed": 1} and results.config("loss") == {}
        with pytest.raises(ValueError, match="no study 'nope'"):
            results.config("nope")
        copies = results.workers("grid")
    assert [c["copy"] for c in copies] == [0, 1, None]   # the trial no copy took: last
    assert [(c["trials"], c["ok"], c["failed"], c["pruned"], c["running"]) for c in copies] \
        == [(3, 2, 0, 1, 0), (2, 1, 1, 0, 0), (1, 0, 0, 0, 1)]
    assert copies[2]["last_finished_at"] is None and copies[0]["last_finished_at"]


def test_a_snapshot_reads_in_one_transaction_per_thread(shared_db):
    with diel.results.open(shared_db) as results:
        opened = []
        session = results.db.session

        def counted():
            opened.append(threading.current_thread().name)
            return session()
        results.db.session = counted
        with results.snapshot():
            results.studies("grid")
            results.trials(study="grid")
            results.config("grid")
            results.epochs("grid")
            with results.snapshot():   # a nested one joins it
                results.versions()
            other = threading.Thread(target=results.runs, name="other")
            other.start()
            other.join()
        assert opened == ["MainThread", "other"]   # another thread reads on its own
        results.config("grid")
        results.runs()
        assert opened == ["MainThread", "other", "MainThread", "MainThread"]
