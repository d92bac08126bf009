# vitrepro: `make install`, `make test`, `make reproduce PAPER=convit [SCALE=tiny|cpu|small|full]`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PAPER  ?=
SCALE  ?=

.PHONY: install constraints test test-fast reproduce reproduce-all plan report bench gpu-check zoo

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# One environment: the versions the tests pass with (constraints.txt), so that a fresh clone does not resolve
# another torch than the records were made with. `make constraints` writes it from a working .venv.
install: $(PY)
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,slurm]"

constraints: $(PY)
	{ sed -n '1,2p' constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# Two workers, a file each at a time (pytest-xdist): the suite's tests use one thread each, so two fill a 2-core machine.
# In collection order (tests/conftest.py puts the longest files first); xdist's default orders files by test count.
test: $(PY)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

test-fast: $(PY)
	$(PY) -m pytest -q -m "not slow"

zoo: $(PY)
	$(PY) -m repro.models.zoo

# `make reproduce PAPER=convit [SCALE=tiny|cpu|small|full] [TABLES=table2] [SEEDS=3] [FORCE=1] [DEADLINE=25m]`: runs, then the
# report (FORCE=0 is no force). DEADLINE (25m, 1h30m, or a UTC time 17:20): python -m repro deadline stops the runs in time.
reproduce: $(PY)
	$(PY) -m repro $(if $(DEADLINE),deadline $(DEADLINE)) reproduce paper=$(PAPER) $(if $(SCALE),scale=$(SCALE)) $(if $(TABLES),tables=$(TABLES)) $(if $(SEEDS),seeds=$(SEEDS)) $(if $(FORCE),force=$(FORCE))

# `make -j2 reproduce-all SCALE=tiny`: every paper and the cross-paper table, one make job each (a tiny run uses one thread, so
# -j2 fills both cores of a 2-core machine); each job rebuilds its paper's report and the index.
PAPERS := oversmoothing augvit cmhsa respostln convit crosspaper  # longest first, for -j
reproduce-all: $(addprefix reproduce-,$(PAPERS))

reproduce-%: $(PY)
	$(PY) -m repro reproduce paper=$* runtime.progress=false $(if $(SCALE),scale=$(SCALE)) $(if $(SEEDS),seeds=$(SEEDS))

# `make plan [PAPER=convit] [SCALE=cpu]`: write results/<id>/<scale>/plan.json (runs, ids, cells, claims, dependencies);
# `make reproduce` writes it too, before its runs. Without SCALE: every scale that has records.
plan: $(PY)
	$(PY) -m repro.plan $(if $(PAPER),--paper $(PAPER)) $(if $(SCALE),--scale $(SCALE))

# `make report [PAPER=convit] [ALLOW_INVALID=1] [NOTEBOOK=auto]`: rebuild reports from committed records and plans only (no training);
# ALLOW_INVALID=1 builds them without the invalid records (each named on stderr) instead of stopping.
report: $(PY)
	$(PY) -m repro.report $(if $(PAPER),--paper $(PAPER)) $(if $(filter-out 0,$(ALLOW_INVALID)),--allow-invalid) $(if $(NOTEBOOK),--notebook $(NOTEBOOK))

# `make gpu-check [PAPER=convit]`: each paper's small run a few steps on this device (bf16 and device-resident
# data on a GPU, compiled and not, checkpoint + resume), one line per paper with images/s (benchmarks/gpu_check.py).
gpu-check: $(PY)
	$(PY) -m benchmarks.gpu_check $(if $(PAPER),--paper $(PAPER))

# `make bench`: ours vs timm (benchmarks/throughput.py), the data path's share of a training step
# (benchmarks/data_path.py), the fast path and fused runs (benchmarks/fastpath.py), the CPU step in fp32 and bf16
# (benchmarks/cpu_step.py); each writes results/bench/<device>*.json.
bench: $(PY)
	$(PY) -m benchmarks.throughput
	$(PY) -m benchmarks.data_path
	$(PY) -m benchmarks.fastpath
	$(PY) -m benchmarks.cpu_step
