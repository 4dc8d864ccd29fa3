# Fairway developer entry points. `make test` works from a fresh clone: it builds .venv first.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo screenshots lock wheel image

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

# The test process itself talks to PostgreSQL without the connection pool (FAIRWAY_DB_POOL=0,
# unless set): the browser tests end stray server connections with pg_terminate_backend, which
# would also end the pool's idle ones. The production-layout e2e test starts its processes with
# the production default (pool on), and tests/api/test_web_tier.py covers the pool's 503.
test: $(STAMP)
	FAIRWAY_DB_POOL=$${FAIRWAY_DB_POOL:-0} $(VENV)/bin/python -m pytest -q

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
	FAIRWAY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(VENV)/bin/python -m pytest -q tests/e2e/test_browser.py tests/sso/test_sso_browser.py

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
