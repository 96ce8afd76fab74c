# The two commands a newcomer needs:
#   make demo   set everything up, then run a local swarm on this CPU (the main job)
#   make test   set everything up, then run the whole test suite (what CI runs)
# The virtualenv is rebuilt only when pyproject.toml changes (stamp file named by its hash).

VENV    ?= .venv
PY      := $(VENV)/bin/python
SWARM   := $(VENV)/bin/swarm
HASH    := $(shell sha256sum pyproject.toml | cut -c1-12)
STAMP   := $(VENV)/.installed-$(HASH)
PYTEST_ARGS ?=
DEMO_CONFIG ?= examples/lab-swarm.yaml   # make demo DEMO_CONFIG=examples/smollm2-swarm.yaml: the real-LM swarm

.PHONY: setup demo demo-solo test test-fast clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the local CPU wheel (a bare requirement would pull a CUDA build)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(SWARM) local --nodes 2 --config $(DEMO_CONFIG) --out runs/demo

demo-solo: setup
	$(SWARM) node --config examples/lab-solo.yaml --out runs/lab-solo

test: setup
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs
