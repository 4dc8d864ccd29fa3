# Fairway developer entry points. `make test` works from a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo

# The virtualenv is (re)installed only when a requirements file changes (stamp file).
$(STAMP): requirements.txt requirements-dev.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -r requirements-dev.txt
	touch $(STAMP)

.venv: $(STAMP)
venv: $(STAMP)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Placeholder: the demo engineer replaces this target (seed_demo + server + local agents).
demo: $(STAMP)
	$(VENV)/bin/python manage.py migrate --noinput
	$(VENV)/bin/python manage.py seed_demo
