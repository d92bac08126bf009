"""The run stage: the runs of plan.json executed, each record written by the run that measured it. Its input is
the plan (and the command's config); it never imports paper experiments, the report or the command line.
reproduce.py checks, then runs in this process (sequential.py, packed.py for fused groups), in ``jobs=N``
processes (parallel.py, child.py) or torchrun ranks; locks.py takes one lock per run; sources.py loads what a
run depends on; deadline.py and forecast.py price a campaign; multirun.py reports Hydra multiruns."""
