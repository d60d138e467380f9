"""An objective written for Optuna, run unchanged by diel (or by Optuna itself).

It picks a classifier (a linear model trained by SGD, or a random forest), then that
classifier's own parameter: a conditional, define-by-run space. It reports the
validation accuracy after each step with ``trial.report(value, step)`` and stops when
``trial.should_prune()`` says so, as Optuna's pruning examples do. Nothing in it is
diel's: the same function runs under ``optuna.create_study().optimize(objective)``.

Data: scikit-learn's bundled 8x8 digits (no download). Every fit is seeded, so a
trial's parameters give its accuracy again when the objective is called by hand::

    python -c "from diel.worker import Trial; import objective as o; \\
print(o.objective(Trial(params={'classifier': 'SGD', 'sgd_alpha': 1e-4}, number=0, study='t')))"
"""

from __future__ import annotations

import functools

import numpy as np
import optuna
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

STEPS = 8            # SGD epochs, or rounds of 4 more trees
CLASSES = np.arange(10)


@functools.lru_cache(maxsize=1)
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """1,347 digits to train on and 450 to validate (a fixed split), scaled to [0, 1]."""
    x, y = load_digits(return_X_y=True)
    return tuple(train_test_split(x / 16.0, y, test_size=0.25, random_state=0))


def objective(trial) -> float:
    """The validation accuracy of the classifier the trial picks."""
    x_train, x_val, y_train, y_val = digits()
    classifier = trial.suggest_categorical("classifier", ["SGD", "RandomForest"])
    if classifier == "SGD":
        alpha = trial.suggest_float("sgd_alpha", 1e-6, 1e-1, log=True)
        model = SGDClassifier(alpha=alpha, random_state=0)
    else:
        depth = trial.suggest_int("rf_max_depth", 2, 32, log=True)
        model = RandomForestClassifier(max_depth=depth, n_estimators=0, warm_start=True,
                                       random_state=0, n_jobs=1)
    accuracy = 0.0
    for step in range(STEPS):
        if classifier == "SGD":
            model.partial_fit(x_train, y_train, classes=CLASSES)
        else:
            model.n_estimators += 4
            model.fit(x_train, y_train)
        accuracy = float(model.score(x_val, y_val))
        trial.report(accuracy, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return accuracy


if __name__ == "__main__":   # the same objective under Optuna alone, for comparison
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner())
    study.optimize(objective, n_trials=20)
    print(study.best_value, study.best_params)
