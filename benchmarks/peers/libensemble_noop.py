"""libEnsemble's side of the search benchmark: no-op evaluations of random points.

Run by benchmarks/search_bench.py in a fresh process, timed from launch to exit
(libEnsemble is not a diel dependency)::

    python benchmarks/peers/libensemble_noop.py --evaluations 2000 --workers 4 --batch 1 \
        --out TIMES.json

Local (multiprocessing) comms, ``--workers`` workers, the generator drawing ``--batch``
points per call, log files off (``disable_log_files``, no history saves). The results stay
in libEnsemble's in-memory history array; nothing is written to a database. Writes the
manager's per-evaluation completion times (``sim_ended_time`` of the history, epoch
seconds, stamped when the manager receives the result) as JSON to ``--out``.
"""

import argparse
import json
from pathlib import Path

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
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the timestamps")
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
    history, _, _ = ensemble.run()
    if ensemble.is_manager:
        done = history["sim_ended_time"][history["sim_ended"]]
        args.out.write_text(json.dumps({"completions": done.tolist()}))


if __name__ == "__main__":
    main()
