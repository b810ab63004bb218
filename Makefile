# One command each, on a fresh machine with Python 3.11+: every target bootstraps .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
STAMP := $(VENV)/.installed
SCAN_VENV := .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed
# The policy pack's own virtualenv, where PulumiPolicy.yaml says the CLI finds it; the CLI does not
# create it for a local pack (`--policy-pack policies`).
POLICY_STAMP := policies/.venv/.installed

.PHONY: help bench render test lint scan golden reference-fixtures config-docs planner-docs secrets-set preview up clean policy-check diff

help:
	@echo "make render STACK=dev     offline render of a stack into build/<stack>/ (no cloud, no CLI)"
	@echo "make test                 the whole test suite"
	@echo "make bench                render time per stack and per model count (figures, not a test)"
	@echo "make lint                 ruff, and the layering contracts (import-linter, pyproject.toml)"
	@echo "make scan                 Checkov over every stack's render and the workflows, with the reviewed skip list"
	@echo "make golden               refresh tests/golden/ after an intended change"
	@echo "make config-docs          regenerate docs/configuration.md and the first-up checklist in docs/operations.md"
	@echo "make planner-docs         regenerate the calibration and benchmark tables in docs/capacity-planner.md"
	@echo "make reference-fixtures   re-derive tests/fixtures/reference from ../shared/reference"
	@echo "make diff STACK=prod      offline diff of a stack against the merge base with main"
	@echo "make policy-check         run the policy pack's rules on every stack's offline render"
	@echo "make preview STACK=prod   pulumi preview (needs the Pulumi CLI and AWS credentials)"
	@echo "make up STACK=prod        pulumi up (needs the Pulumi CLI and AWS credentials)"

$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $(STAMP)

# Checkov and its ~90 dependencies live in their own virtualenv, so `make test` stays fast.
$(SCAN_STAMP): requirements-scan.txt
	$(PYTHON) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-scan.txt
	@touch $(SCAN_STAMP)

scan: $(STAMP) $(SCAN_STAMP)
	$(BIN)/python -m tools.scan --checkov $(SCAN_VENV)/bin/checkov

render: $(STAMP)
	$(BIN)/python -m stacks render $(STACK) --out build/$(STACK)

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m tools.bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

golden: $(STAMP)
	$(BIN)/python -m tests.golden.refresh

config-docs: $(STAMP)
	$(BIN)/python -m tools.config_reference --write docs/configuration.md
	$(BIN)/python -m stacks.checks.prerequisites --write docs/operations.md

planner-docs: $(STAMP)
	$(BIN)/python -m tools.planner_tables --write docs/capacity-planner.md

reference-fixtures: $(STAMP)
	$(BIN)/python tools/derive_reference_fixtures.py

# A committed placeholder secret cannot be decrypted; say which command replaces it.
secrets-set:
	@if grep -q "placeholder:replace-with-pulumi-config-set-secret" Pulumi.$(STACK).yaml; then \
	  echo "Pulumi.$(STACK).yaml still holds placeholder secrets; set each of these first:"; \
	  grep -B1 "placeholder:replace-with" Pulumi.$(STACK).yaml | grep -o "llm-serving:[A-Za-z]*" | \
	    sed "s/^/  pulumi config set --secret /; s/$$/ <value> -s $(STACK)/"; \
	  exit 1; fi

$(POLICY_STAMP): policies/requirements.txt
	$(PYTHON) -m venv policies/.venv
	policies/.venv/bin/python -m pip install --quiet --disable-pip-version-check -r policies/requirements.txt
	@touch $(POLICY_STAMP)

preview: $(STAMP) $(POLICY_STAMP) secrets-set
	pulumi preview --stack $(STACK) --diff --policy-pack policies

up: $(STAMP) $(POLICY_STAMP) secrets-set
	pulumi up --stack $(STACK) --policy-pack policies

clean:
	rm -rf build $(VENV) $(SCAN_VENV) policies/.venv .pytest_cache .ruff_cache

policy-check: $(STAMP)
	$(BIN)/python -m stacks.offline.policy_check

diff: $(STAMP)
	$(BIN)/python -m stacks diff $(STACK)
