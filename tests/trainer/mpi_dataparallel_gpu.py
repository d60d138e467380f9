"""Run under mpiexec -n 2 by test_dataparallel.py's GPU case. On a GPU a data-parallel step
replays two CUDA graphs around the gradient Allreduce; its float64 weights must equal eager
data-parallel steps and one rank (graphed) on the full batch, identical across ranks, for
SGD with momentum and weight decay and for Adam (bias corrections new every step). 201 rows
in global batches of 25: slices of 13/12 rows, and a last batch of 1 row that leaves rank 1
an empty slice. Mixed precision still trains eagerly on two ranks."""

import numpy as np
from mpi4py import MPI

from trainer import SGD, Adam, NeuralNetwork, build_mlp, synthetic

comm = MPI.COMM_WORLD
x, y = synthetic(201, (8,), classes=3, seed=0)


def train(make_optimizer, parallel, graph, dtype="float64", **params):
    params = {"device": "gpu", "seed": 3, "dtype": dtype, "cuda_graph": graph, **params}
    if parallel:
        params["comm"] = comm
    model = NeuralNetwork(build_mlp(8, hidden=[16, 12], classes=3), "cross_entropy", make_optimizer(), params)
    result = model.fit(x, y, epochs=3, batch_size=25)
    return model, result


def weights(model):
    return model.updater.flat_params.get()


cases = {"momentum": lambda: SGD(0.05, momentum=0.9, weight_decay=1e-3), "adam": lambda: Adam(0.01)}
for name, make in cases.items():
    graphed, g_result = train(make, parallel=True, graph=True)
    eager, e_result = train(make, parallel=True, graph=False)
    single, s_result = train(make, parallel=False, graph=True)
    # rank 0: the gradients of its two slice shapes and the update; rank 1: one shape (its last slice is empty)
    captures = 3 if comm.rank == 0 else 2
    assert graphed._graph.captures == captures and not graphed._graph.failed, (name, graphed._graph.failed)
    assert graphed._graph.launches > 2 * 9 and eager._graph is None and graphed.reducer.calls == 3 * 9, name
    w = weights(graphed)
    for other, result in ((eager, e_result), (single, s_result)):
        assert np.allclose(w, weights(other), rtol=1e-10, atol=1e-12), \
            f"{name}: rank {comm.rank} differs by {np.abs(w - weights(other)).max()}"
        assert abs(g_result.loss - result.loss) < 1e-10 and g_result.accuracy == result.accuracy, name
    gathered = comm.allgather(w)
    assert all(np.array_equal(g, gathered[0]) for g in gathered), f"{name}: weights differ across ranks"

mixed, _ = train(lambda: SGD(0.05), parallel=True, graph=True, dtype="float32", mixed_precision=True)
assert mixed._graph is None and mixed.reducer.calls == 3 * 9
if comm.rank == 0:
    print("OK", comm.size, graphed.reducer.transport)
