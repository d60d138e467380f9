"""diel: an openDIEL-style MPI executive for distributed hyperparameter search."""

__version__ = "0.1.0"
