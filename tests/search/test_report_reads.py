"""The final report reads its best trials from the storage's best query, not every
finished trial, and prints what ranking them all would print."""

from __future__ import annotations

import io

from diel.results import MemoryStorage, ResultRecord, ResultsStore, TrialStart
from diel.search import parse_settings
from diel.search.master import _report

OBJECTIVES = [0.5, None, 0.9, 0.5, 0.1, 0.9, 0.3, 0.7]


class ReadsTheBestAlone(ResultsStore):
    """diel's SQL store, which must not list the study's trials."""

    def trials(self, study, status=None):
        raise AssertionError("the report listed every trial")


def stored(store):
    """``store`` with study ``wf``'s trials: ok ones of OBJECTIVES, a failed and a pruned
    one with better values."""
    study = store.open_study("wf", "grid", "accuracy", "maximize", {}).study_id
    store.record(study, starts=[TrialStart(n, {"lr": n / 10}, f'{{"lr":{n}}}')
                                for n in range(len(OBJECTIVES) + 2)])
    store.record(study, results=[ResultRecord(n, "ok", value, accuracy=value)
                                 for n, value in enumerate(OBJECTIVES)] + [
        ResultRecord(len(OBJECTIVES), "failed", 2.0, error="boom"),
        ResultRecord(len(OBJECTIVES) + 1, "pruned", 3.0)])
    return store


def report(store, top: int) -> tuple[str, list[int]]:
    settings = parse_settings({"space": {"lr": {"uniform": [0, 1]}}, "workers": "trainer",
                               "strategy": "random", "max_trials": 10,
                               "report_top": top}, "search")
    out = io.StringIO()
    best = _report(store, settings, "wf", "done", out, 100)
    store.close()
    return out.getvalue(), [trial["number"] for trial in best]


def test_the_report_queries_the_best_and_prints_what_ranking_every_trial_did(tmp_path):
    for top in (3, 20):
        text, numbers = report(stored(ReadsTheBestAlone(f"sqlite:///{tmp_path}/{top}.db")), top)
        assert (text, numbers) == report(stored(MemoryStorage("memory://")), top)
        assert numbers == [2, 5, 7, 0, 3, 6, 4, 1][:top]
        assert text.startswith(f"best {min(top, 8)} of study wf (done):\nnumber  objective")
