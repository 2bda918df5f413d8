# Targets a newcomer can guess. Each one creates the virtualenv it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PACKAGES := workflows activities ledger worker fleetsim migrations

.PHONY: venv demo up test lint fmt bench drills ramp-experiment ramp-experiment-colder provision-kills clean

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

# Every shipped scenario as a drill (about a minute each at 20x): its JSON in
# .fleetmend/drill-SCENARIO.json, and a non-zero exit if any drill found a duplicate or an
# orphan or did not finish.
drills: venv
	@mkdir -p .fleetmend; failed=0; \
	for s in $$($(PY) -m fleetsim scenarios | cut -d: -f1 | grep -vx ramp-experiment); do \
	  echo "== $$s"; \
	  $(BIN)/fleetmend drill $$s --speed 20 --free-ports --auto-approve --json --timeout 600 \
	    > .fleetmend/drill-$$s.json 2> .fleetmend/drill-$$s.log || { echo "$$s: FAILED"; failed=1; }; \
	done; exit $$failed

# The runbook's ramp experiment at its own rates (60 req/s, so 1x: at 2x the fleet fell
# behind its clock on 2 cores): fleetmend's ramp vs --no-ramp, beside the runbook's
# late-request figures. About 18 minutes.
ramp-experiment: venv
	$(PY) -m bench.ramp_bench --speed 1

# The same with a colder replacement, where the equal share goes late (2x, about 10
# minutes): exit status 1 unless ramp 0 late, no ramp late.
ramp-experiment-colder: venv
	$(PY) -m bench.ramp_bench --colder --speed 2

# The worker SIGKILLed in set_router_weights and estimate_lead_time on a no-warm-capacity
# drill at 20x (README, Process faults): outside `make test`, which it would take over
# its time budget.
provision-kills: venv
	$(BIN)/pytest -q tests/faults/drill_provision_kills.py

clean:
	rm -rf $(VENV) .fleetmend .pytest_cache .mypy_cache .ruff_cache
