"""libEnsemble's side of the search benchmark: no-op evaluations of random points.

Run by benchmarks/search_bench.py (libEnsemble is not a diel dependency)::

    python benchmarks/peers/libensemble_noop.py --evaluations 2000 --workers 4 --batch 1

Prints one line, ``ELAPSED <seconds>``: the time of ``Ensemble.run`` with local
(multiprocessing) comms, the generator drawing ``--batch`` points per call.
"""

import argparse
import time

import numpy as np


def noop_sim(H, persis_info, sim_specs, libE_info):
    """Return the point's first coordinate as its value: no work at all."""
    out = np.zeros(len(H), dtype=sim_specs["out"])
    out["f"] = H["x"][:, 0]
    return out, persis_info


def main() -> None:
    from libensemble import Ensemble
    from libensemble.gen_funcs.sampling import uniform_random_sample
    from libensemble.specs import ExitCriteria, GenSpecs, LibeSpecs, SimSpecs
    from libensemble.tools import add_unique_random_streams

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="points per generator call")
    args = parser.parse_args()
    specs = LibeSpecs(nworkers=args.workers, comms="local", disable_log_files=True,
                      save_every_k_gens=0, save_every_k_sims=0)
    ensemble = Ensemble(parse_args=False, libE_specs=specs)
    ensemble.sim_specs = SimSpecs(sim_f=noop_sim, inputs=["x"], outputs=[("f", float)])
    ensemble.gen_specs = GenSpecs(gen_f=uniform_random_sample, outputs=[("x", float, (1,))],
                                  user={"gen_batch_size": args.batch, "lb": np.array([0.0]),
                                        "ub": np.array([1.0])})
    ensemble.persis_info = add_unique_random_streams({}, args.workers + 1)
    ensemble.exit_criteria = ExitCriteria(sim_max=args.evaluations)
    started = time.perf_counter()
    ensemble.run()
    elapsed = time.perf_counter() - started
    if ensemble.is_manager:
        print(f"ELAPSED {elapsed:.6f}")


if __name__ == "__main__":
    main()
