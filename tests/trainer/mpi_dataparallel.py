"""Run under mpiexec by test_dataparallel.py. Every rank also trains a single-rank model on
the full batches; the data-parallel weights must equal it (float64, tight tolerance) and be
identical across ranks, for plain SGD, momentum + DATE with LARS, and Adagrad; divergence
must stop every rank at the same batch; rank 0's callback decision must stop all ranks."""

import numpy as np
from mpi4py import MPI

from trainer import DATE, SGD, Adagrad, NeuralNetwork, TrainingDiverged, build_mlp, synthetic

comm = MPI.COMM_WORLD
# 203 rows in global batches of 25: slices of 7/6/6/6 rows on 4 ranks, and a last batch of
# 3 rows that leaves one of 4 ranks an empty slice.
x, y = synthetic(203, (8,), classes=3, seed=0)


def weights(model):
    return np.concatenate([p.ravel() for layer in model.layers for p in layer.params.values()])


def train(make_optimizer, schedule, parallel):
    params = {"seed": 3, "dtype": "float64", "schedule": schedule}
    if parallel:
        params["comm"] = comm
    model = NeuralNetwork(build_mlp(8, hidden=[16, 12], classes=3), "cross_entropy", make_optimizer(), params)
    result = model.fit(x, y, epochs=3, batch_size=25)
    return model, result


cases = {
    "sgd": (lambda: SGD(0.2, weight_decay=1e-3), None),
    "date-momentum-lars": (lambda: SGD(0.05, momentum=0.9), DATE(base_batch_size=5, warmup_epochs=0.2)),
    "adagrad": (lambda: Adagrad(0.05), None),
}
for name, (make, schedule) in cases.items():
    parallel, p_result = train(make, schedule, True)
    single, s_result = train(make, schedule, False)
    w = weights(parallel)
    assert np.allclose(w, weights(single), rtol=1e-10, atol=1e-12), \
        f"{name}: rank {comm.rank} differs from one rank by {np.abs(w - weights(single)).max()}"
    assert abs(p_result.loss - s_result.loss) < 1e-10 and p_result.accuracy == s_result.accuracy, name
    gathered = comm.allgather(w)
    assert all(np.array_equal(g, gathered[0]) for g in gathered), f"{name}: weights differ across ranks"
    assert parallel.reducer.calls == 3 * 9, f"{name}: {parallel.reducer.calls} Allreduce calls for 27 steps"

# divergence: a NaN in one row reaches only rank 0's slice of batch 1, yet every rank
# raises at that batch (the loss is summed in the same Allreduce; no rank is left waiting)
bad = x.copy()
bad[30, 2] = np.nan
model = NeuralNetwork(build_mlp(8, hidden=[16], classes=3), "cross_entropy", SGD(0.1),
                      {"comm": comm, "shuffle": False})
try:
    model.fit(bad, y, epochs=2, batch_size=25)
    where = None
except TrainingDiverged as e:
    where = (e.epoch, e.batch)
assert set(comm.allgather(where)) == {(0, 1)}, comm.allgather(where)

# rank 0's callback stops every rank
model = NeuralNetwork(build_mlp(8, hidden=[16], classes=3), "cross_entropy", SGD(0.1), {"comm": comm})
result = model.fit(x, y, epochs=3, batch_size=20, callback=lambda s, m: comm.rank == 0 and s.epoch == 1)
assert set(comm.allgather(result.epochs)) == {2}
if comm.rank == 0:
    print("OK", comm.size)
