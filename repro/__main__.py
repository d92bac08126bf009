"""``python -m repro``: see repro/cli.py."""
import sys

try:
    from .cli import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C while the imports (seconds) or the checks run: before any run started
    print("stopped: interrupted before any run started; nothing was written by it: run the same command again",
          file=sys.stderr)
    code = 130
raise SystemExit(code)
