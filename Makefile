# Fairway developer entry points. `make test` works from a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo screenshots

# The virtualenv is (re)installed only when a requirements file changes (stamp file).
$(STAMP): requirements.txt requirements-dev.txt agent/requirements.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -r requirements-dev.txt
	# the console scripts `fairway` (CLI) and `fairway-agent`; the tests do not need them
	$(VENV)/bin/python -m pip install -q --no-deps -e . || echo "console scripts not installed"
	touch $(STAMP)

.venv: $(STAMP)
venv: $(STAMP)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m mypy  # scheduler/policy/, strict ([tool.mypy] in pyproject.toml)

# The demo (docs/demo.md): fresh SQLite under var/demo, seed_demo, server, 4 agents × 8 fake H100,
# replay of 500 Philly jobs; then serves until Ctrl-C. `make demo EXIT=1` exits when the replay is
# done (exit code 0 only if every job reached a final state). PORT=8001 picks another port.
demo: $(STAMP)
	$(VENV)/bin/python scripts/demo.py $(if $(filter 1 yes true,$(EXIT)),--exit) $(if $(PORT),--port $(PORT))

# Refresh docs/screenshots/ from the browser test (Debian's chromium: apt-get install chromium).
screenshots: $(STAMP)
	FAIRWAY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(VENV)/bin/python -m pytest -q tests/e2e/test_browser.py
