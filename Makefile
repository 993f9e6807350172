# Developer shortcuts; CI runs .ci/run (the README's test command).
.DEFAULT_GOAL := help
UV ?= uv

.PHONY: help sync test lint format gov validate range bench
help: ## show this help
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-8s %s\n", $$1, $$2}'

sync: ## install the locked dev environment (with .pyc files, as CI)
	$(UV) sync --frozen --compile-bytecode

test: ## run every package's tests (CPU; GPU tests skip without CUDA)
	scripts/test-all

lint: ## ruff check + format check
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .

format: ## apply ruff fixes and formatting
	$(UV) run --frozen ruff check --fix .
	$(UV) run --frozen ruff format .

gov: ## validate the repo's work items (warnings fail, as in CI)
	$(UV) run --frozen govctl check -W

validate: ## the main job: cpkv-validate, every scenario, both splits and allocators (CPU)
	$(UV) run --frozen --no-default-groups --package cpkv-validate cpkv-validate

range: ## the SGLang plugin's contract tests on every other SGLang release it accepts
	$(UV) run --frozen python scripts/sglang-range

bench: ## run the CPU benchmarks (GPU ones run on the H200: see docs/benchmarks/)
	$(UV) run --frozen python tools/govctl/benchmarks/bench_check.py
	$(UV) run --frozen python packages/cpkv-runtime/benchmarks/bench_runtime.py --device cpu --quick
