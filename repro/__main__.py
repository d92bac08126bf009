"""``python -m repro``: see repro/cli.py."""
from .cli import main

raise SystemExit(main())
