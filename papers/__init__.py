"""Paper folders: ``papers/<id>/`` holds paper.yaml (reported numbers) and experiments.py (runs).

Papers kept outside this repository can be added without editing it: list their parent folders in
``REPRO_PAPERS_PATH`` (os.pathsep-separated); each ``<folder>/<id>/experiments.py`` then counts as
paper ``<id>`` for ``python -m repro``.
"""
import os

__path__ = list(__path__) + [p for p in os.environ.get("REPRO_PAPERS_PATH", "").split(os.pathsep) if p]
