# Fairway developer entry points. `make test` works from a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo screenshots lock wheel image bench

# The virtualenv is (re)installed only when the lock changes (stamp file). requirements.lock pins
# every package of requirements-dev.txt (server, agent, CLI, simulator plots, test tools) with its
# hashes, so a fresh clone installs exactly what was tested, from PyPI alone.
$(STAMP): requirements.lock pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --require-hashes -r requirements.lock
	# the console scripts `fairway` (CLI) and `fairway-agent`; the tests do not need them
	$(VENV)/bin/python -m pip install -q --no-deps -e . || echo "console scripts not installed"
	touch $(STAMP)

.venv: $(STAMP)
venv: $(STAMP)

# WORKERS pytest-xdist processes (WORKERS=0: one process, serially). Each has its own test
# database and its own Redis database (REDIS_URL's number + its index, tests/conftest.py), so two
# suites on one Redis should start their REDIS_URLs at least WORKERS apart. --dist loadfile keeps
# a file's tests (and its module fixtures: the production layout, the podman service) in one
# worker. On PostgreSQL the tests use the connection pool, as production does.
WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n $(WORKERS) --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m mypy  # scheduler/policy/, strict ([tool.mypy] in pyproject.toml)

# The demo (docs/demo.md): fresh SQLite under var/demo, seed_demo, server, 4 agents × 8 fake H100,
# replay of 500 Philly jobs; then serves until Ctrl-C. `make demo EXIT=1` exits when the replay is
# done (exit code 0 only if every job reached a final state). PORT=8001 picks another port.
demo: $(STAMP)
	$(VENV)/bin/python scripts/demo.py $(if $(filter 1 yes true,$(EXIT)),--exit) $(if $(PORT),--port $(PORT))

# DESIGN.md §9's targets in one table (bench/targets.py, docs/benchmarks/README.md): the benches that fit in a
# few minutes at their real sizes; QUICK=1 a smoke run at reduced sizes, ONLY=tick,quote some of them. The
# database ticks need PostgreSQL (DATABASE_URL naming a database with "bench" in its name: it is emptied).
bench: $(STAMP)
	nice -n 10 $(VENV)/bin/python bench/targets.py $(if $(filter 1 yes true,$(QUICK)),--quick) $(if $(ONLY),--only $(ONLY))

# Refresh docs/screenshots/ from the browser tests (Debian's chromium: apt-get install chromium):
# the flow (login, submit, running, pending, canceled, API docs) and SSO on the e2e stack, then a
# lab's week (the demo's seed_demo + import_history, this morning's work: test_screenshots_lab.py,
# skipped by `make test`); the PNGs are then quantized (scripts/compress_png.py).
screenshots: $(STAMP)
	FAIRWAY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(VENV)/bin/python -m pytest -q tests/e2e/test_browser.py tests/sso/test_sso_browser.py tests/web/test_screenshots_lab.py
	$(VENV)/bin/python scripts/compress_png.py docs/screenshots

# Regenerate the hashed locks after editing a requirements file (pip-tools in a throwaway venv,
# Python 3.11, PyPI): requirements.lock (make, CI) and requirements-server.lock (production server).
LOCK_VENV ?= /tmp/fairway-lock-venv
PIP_COMPILE = $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || ($(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install -q pip-tools)
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null $(PIP_COMPILE) -o requirements.lock requirements-dev.txt
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null $(PIP_COMPILE) -o requirements-server.lock requirements.txt

# The `fairway` wheel (CLI and agent only; the server runs from the tree) into dist/.
wheel: $(STAMP)
	$(VENV)/bin/python -m pip wheel -q --no-deps -w dist .

# The server image (docs/deploy.md, "The server image"): a Debian base built by mmdebstrap, cached
# in var/image/ and imported into podman once, then `podman build` of the Containerfile →
# localhost/fairway:<version> and :latest. Needs podman and mmdebstrap (apt-get install podman mmdebstrap).
image:
	bash scripts/build_image.sh
