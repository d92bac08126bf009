"""vitrepro: reproduce the results tables of five Vision Transformer papers on one shared core.

Importing ``repro`` loads nothing heavy: the report stage imports without torch or timm. The repro_* model
names are registered with timm by ``import repro.models``.
"""

__version__ = "0.1.0"
