"""The run stage: the plan's runs executed, each record written by the run that measured it.

reproduce.py the ``reproduce`` command: checks, plan.json, then one of the ways below, then the report
specs.py     the runs one command means (tables asked for, what they depend on, this shard) and their checks
sequential.py runs in order in this process (or torchrun's ranks), twins shared, crashes recorded
packed.py    ``runtime.fused=true``: a cell's runs trained as one fused group
parallel.py  ``jobs=N``: groups of runs in N processes at a time
locks.py     one lock per run, in the results folder, taken the same way by every path above
runtime.py   the ``runtime`` config as the engine's Runtime; torchrun's process count
progress.py  what the scheduler prints: outcomes, ETA, failures, a stopped command's summary
dry_run.py   ``dry_run=true``: two steps of each distinct model, no record
listing.py   ``list``: runs and their status
multirun.py  Hydra multiruns through any launcher (SLURM included), one line per job
deadline.py  a campaign under a deadline: predicted, then stopped and checkpointed in time
"""
