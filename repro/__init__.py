"""vitrepro: reproduce the results tables of five Vision Transformer papers on one shared core."""

__version__ = "0.1.0"

from . import models  # noqa: E402,F401  (registers the repro_* names with timm: import repro is enough)
