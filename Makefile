# MAS — the two commands of the README: `make demo` and `make test` (and `make docs`, the manual).
# Both create .venv, install, start PostgreSQL (embedded, with pgvector, unless
# DATABASE_URL is set) and Redis (unless one answers at REDIS_URL), migrate.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Extra pip arguments for torch, e.g. TORCH_PIP_ARGS="--index-url <a CPU-only index>"
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
DEMO_TOPIC ?= How do ocean tides work?
# `make docs` serves the manual here (daphne has 8000).
MAS_DOCS_PORT ?= 8001
# The environment variables the demo team's definitions may name (docs/security.md, "Secrets"): the keys of the
# providers the manual describes and the GitHub MCP server's token, for team demo only. Set
# MAS_TEAM_SECRETS yourself to declare others; `make test` uses its own (mas_project/settings_test.py).
export MAS_TEAM_SECRETS ?= OPENAI_API_KEY=demo,ANTHROPIC_API_KEY=demo,GEMINI_API_KEY=demo,GITHUB_TOKEN=demo
# Compiled modules are kept (in __pycache__, which git ignores), even where the environment asks Python to write
# none (PYTHONDONTWRITEBYTECODE): each server, worker and test process would compile every module again, pytest
# rewrite every test module (~13 s of CPU per test process here), and pip install .venv's packages uncompiled, which
# every stdio MCP server in its read-only sandbox would then compile at each start.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test docs docs-build stop status setup install services migrate clean-var browser sandbox

demo: setup sandbox
	$(BIN)/python manage.py setup_demo
	$(BIN)/python scripts/services.py start
	$(BIN)/python scripts/services.py wait
	@echo
	@echo "MAS is running:"
	@echo "  monitor     http://127.0.0.1:8000/runs/    (user demo)"
	@echo "  admin       http://127.0.0.1:8000/admin/   (user demo)"
	@echo "  API docs    http://127.0.0.1:8000/api/docs"
	@echo "  health      http://127.0.0.1:8000/api/health"
	@echo "  logs        var/log/web.log, var/log/beat.log, and var/log/worker-<i>.log: one per worker process"
	@echo "              (worker-0.log ... , one per core; MAS_WORKERS sets how many)"
	@echo "  stop with   make stop"
	@echo
	@echo "Running the demo workflow (research -> two reviews at once -> report):"
	$(BIN)/python manage.py run_workflow research-and-review --team demo \
	  --input "topic=$(DEMO_TOPIC)" --base-url http://127.0.0.1:8000
	@echo
	@echo "Starting the second scenario (a question, two specialists at once, an approval, files, a memory):"
	$(BIN)/python manage.py demo_scenario --team demo --base-url http://127.0.0.1:8000

# Dependencies go one way (pyproject.toml, [tool.importlinter]) and the manual builds with no broken link:
# both checked before the tests run (tests/test_docs.py runs the manual's examples).
# The suite runs in TEST_PROCESSES pytest processes at once (pytest-xdist, a file's tests in one process; each
# process has its own test database, Redis database, worker queue and channel prefix: mas_project/settings_test.py),
# then the tests marked `alone` (a process's time, CPU or memory measured), one at a time. Exit status 5 is "no test
# selected": PYTEST_ARGS may name tests of one phase only.
TEST_PROCESSES ?= 3
test: setup browser sandbox
	$(BIN)/lint-imports
	$(MAKE) docs-build
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not alone" $(PYTEST_ARGS) || test $$? = 5
	$(BIN)/python -m pytest -m alone $(PYTEST_ARGS) || test $$? = 5

# The manual (mkdocs.yml, docs/): built into var/site, never into tracked files; offline (no plugin downloads).
# NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2.0, printed on every build.
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir var/site

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(MAS_DOCS_PORT)

# The monitor's browser test drives Debian's Chromium (Playwright's own download is not used).
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  else echo "tests/e2e needs Debian's chromium: sudo apt-get install chromium"; exit 1; fi; }

# code_exec and stdio MCP servers run in Debian's bubblewrap sandbox (tools_app/sandbox.py, tools_app/mcp/sandbox.py).
sandbox:
	@test -x /usr/bin/bwrap || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	  else echo "code_exec and stdio MCP servers need Debian's bubblewrap: sudo apt-get install bubblewrap"; exit 1; fi; }

setup: install services migrate

install: $(STAMP)

# torch is pinned and installed first, by pip (which finds a local wheel where pip.conf names one): an unpinned
# torch pulled in by sentence-transformers would download several GB of CUDA wheels. The rest goes in with uv,
# which sees that torch and installs in parallel (~30 s here, pip ~75 s).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24" "uv>=0.9,<1"
	$(BIN)/python -m pip install --quiet torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/python -m uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[test,docs]'
	touch $(STAMP)

services: install
	$(BIN)/python scripts/services.py deps

migrate: services
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v0

stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/services.py stop; else echo "nothing to stop"; fi

status:
	$(BIN)/python scripts/services.py status
