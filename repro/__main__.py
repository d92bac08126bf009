"""``python -m repro``: see repro/cli.py."""
import os
import signal

# A group of a jobs=N command (REPRO_STOP_SUMMARIZED, repro/train/preempt.py): Ctrl-C reaches it with the whole
# process group, and while it still imports (before its handlers are set) it ended in a KeyboardInterrupt
# traceback. It ignores SIGINT until then; its parent passes Ctrl-C on to it as SIGTERM.
if os.environ.get("REPRO_STOP_SUMMARIZED"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)

from .cli import main  # noqa: E402 - after the signal is set: this import takes seconds

raise SystemExit(main())
