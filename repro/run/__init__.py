"""The run stage: the runs of plan.json executed, each record written by the run that measured it. Its input is
the plan (and the command's config); it never imports paper experiments, the report or the command line.

reproduce.py the ``reproduce`` command's checks, then one of the ways below
specs.py     the plan's runs one command means (tables asked for, what they depend on, this shard), their checks
sequential.py runs in order in this process (or torchrun's ranks), crashes recorded
packed.py    ``runtime.fused=true``: a cell's runs trained as one fused group
parallel.py  ``jobs=N``: the plan's groups of runs in N processes at a time (child.py: one group)
locks.py     one lock per run, in the results folder, taken the same way by every path above
sources.py   what a run reads of the runs it depends on (a final model, a record), loaded before it runs
runtime.py   the ``runtime`` config as the engine's Runtime; torchrun's process count
progress.py  what the scheduler prints: outcomes, ETA, failures, a stopped command's summary
dry_run.py   ``dry_run=true``: two steps of each distinct model, no record
listing.py   ``list``: runs and their status
multirun.py  Hydra multiruns through any launcher (SLURM included), one line per job
deadline.py  a campaign under a deadline: predicted, then stopped and checkpointed in time (forecast.py:
             predicted from a committed benchmark)
outcome.py   a command's exit code and one line, whatever ended it
"""
