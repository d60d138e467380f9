"""The plot kinds and what each shows, in one place for ``diel plot --help`` (which must
not import the plotting code) and :data:`diel.plot.KINDS`."""

KIND_HELP = {
    "history": "the objective of each trial by trial number, and the best so far",
    "parallel": "parallel coordinates of the parameters and the objective of the ok trials",
    "importance": "each parameter's importance for the objective (fANOVA, via Optuna)",
    "slice": "the objective against each parameter, one panel a parameter",
    "curves": "per-epoch metrics of every trial; pruned trials dashed, x where stopped",
    "pareto": "two objectives of a study of several against each other, the front marked",
    "timeline": "one row per worker copy, a bar per trial coloured by status",
    "lineage": "population-based training's family tree (members over steps, an edge "
               "from each donor) and each changing parameter's schedule over the steps",
}

# The output file's extension -> what draws it (json: the plot's data itself).
WRITERS = {".png": "matplotlib", ".svg": "matplotlib", ".html": "plotly", ".json": "json"}

# fANOVA's forest costs about 6 s per 1,000 trials on one core and grows faster than
# linearly: past this many ok trials, importance is computed over a seeded sample.
IMPORTANCE_TRIALS = 2000
