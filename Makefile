# gpuplan: `make demo` runs the main job on this machine, `make test` runs the tests.
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: setup setup-test demo test test-gpu lint format bench schema reference clean

setup:
	@scripts/setup.sh

setup-test:
	@scripts/setup.sh --test

# The main job: probe this machine (quick), calibrate with what it measured (plus the
# published reference set), and plan the example scenario from that calibration.
demo: setup
	$(BIN)/gpuplan probe --quick --out results/
	$(BIN)/gpuplan results show latest
	$(BIN)/gpuplan calibrate results/ --out $(OUT)/demo/calibration.json
	$(BIN)/gpuplan plan examples/llama-pretrain.yaml --out $(OUT)/demo --calibration $(OUT)/demo/calibration.json --results results/
	@echo "Report: $(OUT)/demo/report.html (also report.md and plan.json)"

test: setup-test
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check gpuplan tests benchmarks scripts
	$(BIN)/lint-imports

test-gpu: setup
	tests/gpu/run.sh

lint:
	$(BIN)/ruff check gpuplan tests benchmarks scripts
	$(BIN)/ruff format --check gpuplan tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

format:
	$(BIN)/ruff format gpuplan tests benchmarks scripts
	$(BIN)/ruff check --fix gpuplan tests benchmarks scripts

bench: setup
	$(BIN)/python -m benchmarks

# Rebuild results/reference/ and the shipped default calibration artifact from the
# published microbenchmarks, then refit the forecasts' framework constants on it (run after
# changing the catalog or the calibration models; tests check all three are current).
reference: setup
	$(BIN)/python scripts/build_reference.py --artifact
	$(BIN)/gpuplan validate training --fit-constants gpuplan/forecast/data/training_constants.json
	$(BIN)/python -m gpuplan.forecast.validation_inference --write

schema: setup
	$(BIN)/python -m gpuplan.results.schema

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache $(OUT)
