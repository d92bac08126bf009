"""vitrepro: reproduce the results tables of five Vision Transformer papers on one shared core."""

__version__ = "0.1.0"

import warnings  # noqa: E402

with warnings.catch_warnings():  # timm's hub import pulls in tqdm.auto, which warns in Jupyter without ipywidgets
    warnings.filterwarnings("ignore", message="IProgress not found")
    from . import models  # noqa: E402,F401  (registers the repro_* names with timm: import repro is enough)
