# vitrepro: `make install`, `make test`, `make reproduce PAPER=convit [SCALE=tiny|small|full]`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PAPER  ?=
SCALE  ?=

.PHONY: install test test-fast reproduce report bench zoo clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q -e ".[dev]"

test: $(PY)
	$(PY) -m pytest -q

test-fast: $(PY)
	$(PY) -m pytest -q -m "not slow"

zoo: $(PY)
	$(PY) -m repro.models.zoo
