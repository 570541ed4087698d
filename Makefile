# `make run` and `make test` do all set-up: the venv is (re)built only when requirements*.txt change.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
PORT ?= 8501

.PHONY: run test test-fast lint bench bench-gpu soak clean-venv

# A new venv holds PyTorch with its CUDA libraries, about 7 GB: said before pip would stop part-way with "No space
# left on device". Only a new one is checked: a reinstall into an existing venv adds little.
VENV_GB ?= 8
# The disk is the nearest existing folder above the venv's: `python -m venv` makes any folders missing on the way.
DISK_CHECK := import shutil, sys; from pathlib import Path; \
	where = next(p for p in Path('$(VENV)').absolute().parents if p.is_dir()); \
	free = shutil.disk_usage(where).free / 2**30; \
	sys.exit(0 if free >= $(VENV_GB) else f'make: the virtual environment $(VENV) needs about $(VENV_GB) GiB and {where} has \
	{free:.1f} GiB free. Free some disk space there, or build it on a bigger disk (make VENV=/path/to/venv ...).')

# tools/install.py: requirements-lock.txt's exact versions in two pips side by side where the lock was written (Linux
# x86-64, Python 3.11), else requirements.txt
$(STAMP): requirements.txt requirements-lock.txt
	@test -x $(PY) || $(PYTHON) -c "$(DISK_CHECK)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) tools/install.py
	cp requirements.txt $(STAMP)

# The project's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (our CI machine sets it) Python never
# writes it, so each of the many processes a server or the suite starts (workers, sweep trials) compiled every
# brnn_core module again. Stale files are recompiled here and ignored by Python, so an edit is always seen.
COMPILE := $(PY) -m compileall -q brnn_core ui benchmarks tests

run: $(STAMP)
	$(COMPILE)
	$(PY) -m ui.serve --server.address 127.0.0.1 --server.port $(PORT)

# Four files at a time: on two cores this beat two at a time, though the suite is CPU-bound throughout
# (benchmarks/README.md, "The suite"); slow files start first (tests/conftest.py).
PYTEST_PARALLEL ?= -n 4 --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(PY) -m ruff check .
	$(COMPILE)
	$(PY) -m pytest $(PYTEST_PARALLEL)

# while you work: no browser, no slow tests (markers in pyproject.toml); `make test` runs everything
test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(COMPILE)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not browser and not slow"

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks

# everything the CUDA path must prove (benchmarks/README.md, "GPU"); one line and exit 0 without CUDA.
# Fashion-MNIST from $$BRNN_DATA_DIR. On a GPU machine without this venv: python3 -m benchmarks.cuda_check --data-dir DIR
bench-gpu: $(STAMP)
	$(PY) -m benchmarks.cuda_check

clean-venv:
	rm -rf $(VENV)

soak: $(STAMP)
	$(PY) -m benchmarks.soak --minutes 30
