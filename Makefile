# Two commands do everything on a fresh machine:
#   make demo   # set up .venv, then vanilla and erase side by side (DEMO_STEPS each) and their comparison
#   make test   # set up .venv, then run the test suite
# GPU users: `make setup TORCH_SPEC=torch` keeps pip's default (CUDA) torch build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# vanilla starts hacking at about step 40 on the embedded default (hack/student ~0.5 by step 60)
DEMO_STEPS ?= 60
DEMO_ARGS = --trainer.max_steps $(DEMO_STEPS) --trainer.logger.init_args.save_dir logs/demo

.PHONY: setup demo test
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

demo: setup
	rm -rf logs/demo
	@echo "== 1/2 vanilla GRPO: V is only measured =="
	$(BIN)/pgrpo fit --config configs/vanilla.yaml $(DEMO_ARGS)
	@echo "== 2/2 erase: the hack-ward part of each gradient is removed =="
	$(BIN)/pgrpo fit --config configs/erase.yaml $(DEMO_ARGS)
	$(BIN)/pgrpo report logs/demo

test: setup
	$(BIN)/python -m pytest
