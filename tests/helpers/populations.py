"""Studies written straight through the results store, with what the readers' tests of
lineage and of trials with different parameter sets need (no search engine runs):

* ``pbt``: a population of five members over 12 epochs, exploits at steps 4 and 8
  and a resample from a member's own checkpoint (population-based training's lineage:
  segments with parents);
* ``conditional``: trials whose parameters differ (a conditional space, define-by-run),
  some of them suggested as they ran, with their distributions.
"""

from __future__ import annotations

from diel.results import EpochRecord, ResultRecord, ResultsStore, Suggested, TrialStart

POPULATION = 5
EPOCHS = 12
# member: (step, donor, its new learning rate) for each exploit it made; member 1's
# donor was gone at step 8: it resampled its parameters and went on from its own state
EXPLOITS = {1: [(8, 1, 0.04)], 2: [(4, 0, 0.05)], 3: [(4, 1, 0.012), (8, 0, 0.03)]}
LOG_UNIFORM = {"kind": "float", "low": 1e-4, "high": 1.0, "log": True}
DEPTHS = {"kind": "int", "low": 2, "high": 32, "log": True}


def _params(lr: float) -> dict:
    return {"lr": lr, "momentum": 0.9}


def _key(params: dict) -> str:
    return str(sorted(params.items()))


def fill_population(url: str) -> str:
    """Write study ``pbt`` into the database at ``url`` (see the module docstring);
    returns ``url``. Each member's accuracy at epoch e is e / 100 plus a tenth of its
    number, so the family tree has a clear order."""
    store = ResultsStore(url)
    study = store.open_study("pbt", "pbt", "accuracy", "maximize", {"seed": 1}).study_id
    starts = [TrialStart(n, _params(0.1 / (n + 1)), _key(_params(0.1 / (n + 1))))
              for n in range(POPULATION)]
    store.record(study, starts=starts)
    for step in range(1, EPOCHS + 1):
        store.record(study, epochs=[EpochRecord(n, step, {"accuracy": step / 100 + n / 10})
                                    for n in range(POPULATION)])
        exploits = [TrialStart(n, _params(lr), _key(_params(lr)), resumed_from=step,
                               parent_trial=donor, parent_step=step)
                    for n, made in EXPLOITS.items() for at, donor, lr in made if at == step]
        if exploits:
            store.record(study, starts=exploits)
    store.record(study, results=[ResultRecord(n, "ok", EPOCHS / 100 + n / 10,
                                              accuracy=EPOCHS / 100 + n / 10, epoch=EPOCHS)
                                 for n in range(POPULATION)])
    store.close()
    return url


def fill_conditional(url: str) -> str:
    """Write study ``conditional`` into the database at ``url``: trial 0 an SVC with
    ``svc_c``, trial 1 a forest with ``rf_depth`` (suggested as it ran), trial 2 a forest
    without it, trial 3 an SVC with ``svc_c`` 0 (a zero that is there, unlike a missing
    one); returns ``url``."""
    store = ResultsStore(url)
    study = store.open_study("conditional", "random", "accuracy", "maximize", {}).study_id
    params = [{"classifier": "SVC", "svc_c": 0.5}, {"classifier": "forest"},
              {"classifier": "forest"}, {"classifier": "SVC", "svc_c": 0}]
    store.record(study, starts=[TrialStart(n, p, _key(p)) for n, p in enumerate(params)])
    store.record(study, suggested=[Suggested(1, "rf_depth", 8, DEPTHS)],
                 results=[ResultRecord(n, "ok", 0.5 + n / 10, accuracy=0.5 + n / 10)
                          for n in range(len(params))])
    store.close()
    return url
