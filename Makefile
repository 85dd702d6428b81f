# Two commands do everything on a fresh machine:
#   make demo   # set up .venv, then `pgrpo fit --config configs/erase.yaml`
#   make test   # set up .venv, then run the test suite
# GPU users: `make setup TORCH_SPEC=torch` keeps pip's default (CUDA) torch build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: setup demo test
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

demo: setup
	$(BIN)/pgrpo fit --config configs/erase.yaml

test: setup
	$(BIN)/python -m pytest
