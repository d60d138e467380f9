"""A scikit-learn linear classifier on the shipped MNIST subset, as a diel search objective.

``SGDClassifier`` is trained one epoch at a time with ``partial_fit``, and after each
epoch the validation accuracy is reported with ``trial.report``, so the search can prune
a trial that is falling behind (``report`` returns True: return at once). The function
returns the final metrics, ``accuracy`` and ``time`` (seconds spent fitting).

Try it without diel or MPI::

    python -c "from diel.worker import Trial; import train; \
print(train.objective(Trial(params={'alpha': 1e-4, 'loss_fn': 'hinge'}, number=0, study='t')))"
"""

from __future__ import annotations

import functools
import time

import numpy as np
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import log_loss

from trainer.data import load_mnist5k, prepare, split

CLASSES = np.arange(10)


@functools.lru_cache(maxsize=1)
def mnist() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 5,000 shipped digits as flat float32 784-vectors in [0, 1]: 4,000 to train and
    1,000 to validate. Cached, so a worker process loads them once, not once per trial."""
    x, y = prepare(*load_mnist5k())
    return split(x, y, n_train=4000)


def objective(trial) -> dict[str, float]:
    """Fit ``SGDClassifier`` for ``epochs`` passes over the training digits.

    Parameters (``trial.params``): ``alpha`` (the L2 penalty, 1e-4), ``loss_fn``
    (SGDClassifier's ``loss``: ``hinge``, ``log_loss``, ``modified_huber``, ...;
    ``hinge``), ``epochs`` (10), ``seed`` (0). Named ``loss_fn`` so that it is not
    mistaken for the ``loss`` metric in the results.
    """
    params = trial.params
    epochs = int(params.get("epochs", 10))
    seed = int(params.get("seed", 0))
    model = SGDClassifier(alpha=float(params.get("alpha", 1e-4)),
                          loss=str(params.get("loss_fn", "hinge")), random_state=seed)
    x_train, y_train, x_val, y_val = mnist()
    shuffle = np.random.default_rng(seed)

    fitting = 0.0
    accuracy = 0.0
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        order = shuffle.permutation(len(x_train))
        model.partial_fit(x_train[order], y_train[order], classes=CLASSES)
        fitting += time.perf_counter() - started
        accuracy = float(model.score(x_val, y_val))
        metrics = {"accuracy": accuracy}
        if hasattr(model, "predict_proba"):      # probabilistic losses also give a loss
            metrics["loss"] = log_loss(y_val, model.predict_proba(x_val), labels=CLASSES)
        if trial.report(epoch, **metrics):
            break                                # pruned by the search: return what we have
    return {**metrics, "time": fitting}
