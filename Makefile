# Targets a newcomer can guess. Each one creates the virtualenv it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PACKAGES := workflows activities ledger worker fleetsim migrations

.PHONY: venv demo up test lint fmt bench bench-quick clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/fleetmend demo

up: venv
	$(BIN)/fleetmend up

lint: venv
	$(BIN)/ruff format --check $(PACKAGES) tests bench
	$(BIN)/ruff check $(PACKAGES) tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: venv
	$(BIN)/ruff format $(PACKAGES) tests bench
	$(BIN)/ruff check --fix $(PACKAGES) tests bench

test: lint
	$(BIN)/pytest -q

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) .fleetmend .pytest_cache .mypy_cache .ruff_cache
