"""vitrepro: reproduce the results tables of five Vision Transformer papers on one shared core."""

__version__ = "0.1.0"
