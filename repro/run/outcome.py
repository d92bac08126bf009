"""A command's exit code and its one line on stderr, whatever ended it: bad input 2, runs that crashed 1, a stop
(SIGTERM, Ctrl-C, a deadline) 143 or 130, a full disk 2. In a multirun job a crash is one line too (the
launcher's parent lists it with the job's log); elsewhere it stays a traceback."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

from .. import records
from ..errors import one_line
from ..train import preempt
from . import multirun
from .sequential import BAD_INPUT


class RunsFailed(Exception):
    """Some runs crashed (each recorded as failed, the others ran): exit code 1, one line naming them."""


def outcome(command: Callable[[], int | None]) -> tuple[int, str | None]:
    """Run ``command`` under the stop signals; its exit code and its one-line error, also printed on stderr."""
    try:
        with preempt.on_signals():
            return int(command() or 0), None
    except BAD_INPUT as e:
        code, error = 2, f"error: {one_line(e)}"
    except RunsFailed as e:
        code, error = 1, f"error: {one_line(e)}"
    except preempt.Preempted as e:
        code, error = preempt.exit_code(), f"stopped: {one_line(e)}"
        if os.environ.get(preempt.SUMMARIZED):  # a group of a jobs=N command: its parent says it once for all
            return code, error
    except Exception as e:
        if records.disk_full(e):
            return 2, _said(f"error: no space left on the device writing {e.filename or 'a file'}; nothing "
                            f"half-written is kept and the finished runs keep their records: free space, then run "
                            f"the same command again")
        if not multirun.in_multirun():
            raise
        traceback.print_exc()
        code, error = 1, f"crashed: {type(e).__name__}: {one_line(e)}"
    return code, _said(error)


def _said(error: str) -> str:
    print(error, file=sys.stderr, flush=True)
    return error
