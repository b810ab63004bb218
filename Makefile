# One command each, on a fresh machine with Python 3.11+: every target bootstraps .venv first, with
# PYTHON (default python3).
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

.PHONY: help bench render test lint scan zizmor-result locks golden schema reference-fixtures docs config-docs planner-docs preflight-docs secrets-set preflight preview up node-group-guard clean policy-check diff

help:
	@echo "make render STACK=dev     offline render of a stack into build/<stack>/ (no cloud, no CLI)"
	@echo "make test                 the whole test suite"
	@echo "make bench [SUITE=1]      render time per stack and per model count (figures, not a test); SUITE=1 also times make test"
	@echo "make lint                 ruff, mypy, and the layering contracts (import-linter, pyproject.toml)"
	@echo "make scan                 Checkov (renders, workflows) and zizmor (workflows), with the reviewed lists"
	@echo "make zizmor-result        record zizmor's findings (security/zizmor-result.yaml) for the docs' table"
	@echo "make locks                re-lock the hashed *.lock files after a change to a requirements file"
	@echo "make golden               refresh tests/golden/ after an intended change"
	@echo "make schema               rewrite provider/schema.json, the multi-language package's schema"
	@echo "make docs                 regenerate every generated figure and table in README.md and docs/"
	@echo "make config-docs          regenerate docs/configuration.md and the first-up checklist in docs/operations.md"
	@echo "make planner-docs         regenerate the planner tables (docs/capacity-planner.md, docs/verification.md)"
	@echo "make reference-fixtures   re-derive tests/fixtures/reference from ../shared/reference"
	@echo "make diff [STACK=prod]    offline diff of a stack (default: every stack) against the merge base with main"
	@echo "make policy-check         run the policy pack's rules on every stack's offline render"
	@echo "make preflight-docs       regenerate the check table in docs/preflight.md and security/preflight-policy.json"
	@echo "make preflight STACK=prod read-only checks of the real account, cluster and Hub (needs AWS credentials)"
	@echo "make preview STACK=prod   preflight, then pulumi preview (Pulumi CLI, AWS credentials; SKIP_PREFLIGHT=1 skips)"
	@echo "make up STACK=prod        preflight, then pulumi up (Pulumi CLI, AWS credentials; SKIP_PREFLIGHT=1 skips), after node-group-guard"
	@echo "make node-group-guard STACK=prod  refuse while a pending node-group deletion still hosts replicas (Pulumi CLI, AWS credentials)"

# First run only (about two minutes): pip prints each package as it collects and installs it (no
# filter in between: a pipe would hide pip's exit status from make). --no-deps: the lock is pip-compile's whole
# closure, installed as it is with no resolution; resolving again makes the pip bundled with Python 3.11 (23.2)
# refuse a dependency named with an extra that --strip-extras left out of the lock (lm_eval's
# dataproperty -> typepy[datetime]: "all requirements must have their versions pinned").
$(STAMP): requirements-dev.lock
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@echo "==> [1/2] creating $(VENV) with $$($(PYTHON) --version) ($(PYTHON))"
	@$(PYTHON) -m venv $(VENV)
	@echo "==> [2/2] installing requirements-dev.lock (pinned, with hashes) into $(VENV) (first run only)"
	@$(BIN)/python -m pip install --disable-pip-version-check --progress-bar off --no-deps --require-hashes -r requirements-dev.lock
	@touch $(STAMP)
	@echo "==> $(VENV) ready"

# Checkov and its ~90 dependencies live in their own virtualenv, so `make test` stays fast.
# From the hashed lock, as CI installs it: the scanners are what decides whether a finding is new.
$(SCAN_STAMP): requirements-scan.lock
	@echo "==> [1/2] creating $(SCAN_VENV) for Checkov and zizmor with $$($(PYTHON) --version) (first run only)"
	@$(PYTHON) -m venv $(SCAN_VENV)
	@echo "==> [2/2] installing Checkov, zizmor and their pinned, hashed dependencies into $(SCAN_VENV) (about two minutes)"
	@$(SCAN_VENV)/bin/python -m pip install --disable-pip-version-check --progress-bar off --require-hashes -r requirements-scan.lock
	@touch $(SCAN_STAMP)
	@echo "==> $(SCAN_VENV) ready"

scan: $(STAMP) $(SCAN_STAMP)
	@echo "==> scan: Checkov over every stack's render and the workflows, zizmor over the workflows, against the reviewed lists in security/"
	$(BIN)/python -m tools.scan --checkov $(SCAN_VENV)/bin/checkov --zizmor $(SCAN_VENV)/bin/zizmor

# zizmor's result as docs/operations.md shows it (security/zizmor-result.yaml); `make scan` fails when it differs.
zizmor-result: $(STAMP) $(SCAN_STAMP)
	$(BIN)/python -m tools.scan --zizmor-only --update-zizmor-result --checkov $(SCAN_VENV)/bin/checkov --zizmor $(SCAN_VENV)/bin/zizmor

render: $(STAMP)
	@echo "==> render: offline render of stack $(STACK) into build/$(STACK)/ (no cloud, no CLI)"
	$(BIN)/python -m stacks render $(STACK) --out build/$(STACK)

# On every core (pytest-xdist): the suite is CPU-bound (renders under the mock runtime, schema
# validation), and one process on the 2-core machine took 70 s.
# PYTHONDONTWRITEBYTECODE emptied: with it set (some shells and containers do), pytest re-parses and
# rewrites the asserts of every test module in every worker on every run (several s of CPU each).
test: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP)
	@echo "==> test: the whole suite on every core"
	$(BIN)/python -m pytest -n auto --dist worksteal

bench: $(STAMP)
	@echo "==> bench: render time per stack and per model count"
	$(BIN)/python -m tools.bench $(if $(SUITE),--suite)

# mypy reads [tool.mypy] in pyproject.toml; its first run over the SDKs takes minutes, .mypy_cache the later ones.
lint: $(STAMP)
	@echo "==> lint: ruff, then the type checker (mypy), then the layering contracts (import-linter)"
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

schema: $(STAMP)
	$(BIN)/python -m tools.package_schema

golden: $(STAMP)
	@echo "==> golden: refreshing tests/golden/ from the current renders"
	$(BIN)/python -m tests.golden.refresh

# Every figure the program computes, in README.md and docs/ (tools/docs.py; includes the two below).
docs: $(STAMP)
	$(BIN)/python -m tools.docs

config-docs: $(STAMP)
	$(BIN)/python -m tools.config_reference --write docs/configuration.md
	$(BIN)/python -m stacks.checks.prerequisites --write docs/operations.md

planner-docs: $(STAMP)
	$(BIN)/python -m tools.planner_tables --write docs/capacity-planner.md
	$(BIN)/python -m tools.verification_table --write docs/verification.md

preflight-docs: $(STAMP)
	$(BIN)/python -m tools.preflight_docs --write

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

# Read-only checks of the account and cluster (docs/preflight.md); exit 1 when a check fails.
preflight: $(STAMP)
	$(BIN)/python -m stacks preflight $(STACK)

# Preflight first: what the account would refuse 10 to 90 minutes into an up fails here in seconds.
# SKIP_PREFLIGHT=1 skips it (e.g. a could-not-check you have verified by hand, or no network to AWS).
PREFLIGHT_FIRST = $(if $(filter 1,$(SKIP_PREFLIGHT)),@echo "preflight skipped (SKIP_PREFLIGHT=1)",$(BIN)/python -m stacks preflight $(STACK))

preview: $(STAMP) $(POLICY_STAMP) secrets-set
	$(PREFLIGHT_FIRST)
	pulumi preview --stack $(STACK) --diff --policy-pack policies

up: $(STAMP) $(POLICY_STAMP) secrets-set node-group-guard
	$(PREFLIGHT_FIRST)
	pulumi up --stack $(STACK) --policy-pack policies

# A failed node update leaves the old group pending deletion, and the next up deletes it first
# (pulumi/pulumi#9979): refuse while its nodes still host replicas (tools/node_group_guard.py). The
# guard reads the pods of the stack file's cluster itself, not the current kubectl context's; the
# deploy workflow runs the same two commands (.github/workflows/pulumi-up.yml).
node-group-guard: $(STAMP)
	@mkdir -p build
	pulumi stack export --stack $(STACK) --file build/$(STACK)-state.json
	$(BIN)/python -m tools.node_group_guard build/$(STACK)-state.json --stack $(STACK)

clean:
	rm -rf build $(VENV) $(SCAN_VENV) policies/.venv .pytest_cache .ruff_cache

policy-check: $(STAMP)
	@echo "==> policy-check: the policy pack's rules on every stack's offline render"
	$(BIN)/python -m stacks.offline.policy_check

# The diff exits 1 when it found changes, the normal case of a pull request: only 2 (it could not
# run) fails the target. Without STACK=... on the command line, every stack file is diffed.
diff: $(STAMP)
	@echo "==> diff: offline diff against the merge base with main"
	@$(BIN)/python -m stacks diff $(if $(filter command line,$(origin STACK)),$(STACK)) || [ $$? -eq 1 ]

# The hashed locks the workflows install with `pip install --require-hashes` (tests/test_workflows.py
# checks that each holds its requirements file's pins). Needs the package index.
LOCK_OPTIONS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
locks: $(STAMP)
	$(BIN)/pip-compile $(LOCK_OPTIONS) --output-file requirements.lock requirements.txt
	$(BIN)/pip-compile $(LOCK_OPTIONS) --output-file requirements-dev.lock requirements-dev.txt
	$(BIN)/pip-compile $(LOCK_OPTIONS) --output-file requirements-scan.lock requirements-scan.txt
	$(BIN)/pip-compile $(LOCK_OPTIONS) --output-file policies/requirements.lock policies/requirements.txt
