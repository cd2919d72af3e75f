# gpuplan: `make demo` runs the main job on this machine, `make test` runs the tests.
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: setup setup-test demo test test-gpu lint format bench schema reference clean

setup:
	@scripts/setup.sh

setup-test:
	@scripts/setup.sh --test

# The main job: probe this machine (quick), calibrate, and plan the example scenario.
demo: setup
	$(BIN)/gpuplan probe --quick --out results/
	$(BIN)/gpuplan results show latest

test: setup-test
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check gpuplan tests benchmarks scripts

test-gpu: setup
	tests/gpu/run.sh

lint:
	$(BIN)/ruff check gpuplan tests benchmarks scripts
	$(BIN)/ruff format --check gpuplan tests benchmarks scripts
	$(BIN)/mypy

format:
	$(BIN)/ruff format gpuplan tests benchmarks scripts
	$(BIN)/ruff check --fix gpuplan tests benchmarks scripts

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache $(OUT)
