"""A stand-in for an existing simulation program, run by diel as an executable module.

diel starts it once per rank (never through a shell) with the arguments of the
workflow's ``command`` list, placeholders filled in, and tells it where it runs through
``DIEL_*`` environment variables. It writes a small JSON result where
``DIEL_RESULT_FILE`` says.
"""

import argparse
import json
import os
import random


def main() -> None:
    parser = argparse.ArgumentParser(description="toy Monte Carlo estimate of pi")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    generator = random.Random(args.seed)
    inside = sum(generator.random() ** 2 + generator.random() ** 2 <= 1 for _ in range(args.samples))
    estimate = 4 * inside / args.samples
    where = (f"module {os.environ['DIEL_MODULE']} copy {os.environ['DIEL_COPY']} "
             f"rank {os.environ['DIEL_RANK']}/{os.environ['DIEL_SIZE']} "
             f"iteration {os.environ['DIEL_ITERATION']}")
    print(f"{where}: pi ~ {estimate:.4f} from {args.samples} samples", flush=True)
    with open(os.environ["DIEL_RESULT_FILE"], "w", encoding="utf-8") as result:
        json.dump({"estimate": estimate, "samples": args.samples}, result)


if __name__ == "__main__":
    main()
