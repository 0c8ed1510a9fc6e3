# cubinforge: `make kernels ARCH=sm90` builds the default SM90 set into the local registry;
# `make test` runs the CPU test-suite (GPU tests skip where there is no GPU).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

ARCH ?= sm90
# sm100 has its own set (fa4_fwd, never run: docs/kernels.md); every other arch builds `default`.
SET ?= $(if $(filter sm100 sm_100 sm_100a,$(ARCH)),sm100,default)
JOBS ?= $(shell nproc)
# Optional filters, passed through when set: DTYPE=bf16 HDIM=128 CAUSAL=1
FILTERS := $(if $(DTYPE),--dtype $(DTYPE)) $(if $(HDIM),--head-dim $(HDIM)) $(if $(CAUSAL),--causal $(CAUSAL))
# Optional: CLUSTER=local:4 (a Dask LocalCluster) or CLUSTER=tcp://host:8786 (a running scheduler)
CLUSTER ?=

.PHONY: kernels test device-test bench serve venv clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[runtime,build,server,cluster,dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

kernels: $(STAMP)
	$(VENV)/bin/cubinforge build --arch $(ARCH) --set $(SET) --jobs $(JOBS) $(FILTERS) $(if $(CLUSTER),--cluster $(CLUSTER))

test: $(STAMP)
	$(PY) -m pytest -q -ra tests

# On a machine with a Hopper GPU (the lent H200), from a plain checkout with no install:
# every GPU test over the local registry, and the benchmark harness. That machine has no CuTe
# DSL: tests/test_runtime_device_collect.py runs this target with `cutlass` unimportable
# (PYTEST_ARGS=--collect-only, a blocker on PYTHONPATH, which is kept after the checkout).
device-test:
	PYTHONPATH=$(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH)) $(PYTHON) -m pytest -q -ra -m gpu -p no:cacheprovider $(PYTEST_ARGS) tests

bench:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m cubinforge.bench $(BENCH_ARGS)

serve: $(STAMP)
	$(VENV)/bin/cubinforge serve --host 127.0.0.1 --port 8000

clean:
	rm -rf .cubinforge build *.egg-info
