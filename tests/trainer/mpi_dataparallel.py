"""Run under mpiexec by test_dataparallel.py: each rank trains on its shard; the averaged
gradients must keep every rank's weights identical, and metrics agree across ranks."""

import numpy as np
from mpi4py import MPI

from trainer import NeuralNetwork, SGD, build_mlp, synthetic

comm = MPI.COMM_WORLD
x, y = synthetic(400, (8,), classes=3, seed=0)
model = NeuralNetwork(build_mlp(8, hidden=[16], classes=3), "cross_entropy", SGD(0.1),
                      {"comm": comm, "seed": 0})
result = model.fit(x, y, epochs=3, batch_size=20, callback=lambda s, m: comm.rank == 0 and s.epoch == 1)
weights = np.concatenate([p.ravel() for layer in model.layers for p in layer.params.values()])
gathered = comm.allgather((weights, result.loss, result.epochs))
assert all(np.array_equal(w, gathered[0][0]) for w, _, _ in gathered), "weights differ across ranks"
assert len({loss for _, loss, _ in gathered}) == 1 and {e for _, _, e in gathered} == {2}
if comm.rank == 0:
    print("OK", result.loss)
