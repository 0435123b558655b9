# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and
# install the project from pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint bench clean packages

# Programs some tests drive as users meet them: nginx and haproxy as real rate limiters,
# chromium for the live page, wrk as a load generator. Installed from the distribution
# when this runs as root with apt (CI does); elsewhere those tests skip, naming the binary.
SYSTEM_PACKAGES := nginx-light haproxy chromium wrk

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/driver-review demo $(ARGS)

packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing$$missing"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -q --no-install-recommends $$missing >/dev/null \
	      || echo "apt-get could not install$$missing: the tests that need them skip"; \
	  fi; \
	else echo "not root with apt: tests needing $(SYSTEM_PACKAGES) skip where missing"; fi

test: $(STAMP) packages lint
	$(BIN)/python -m pytest $(ARGS)

# Formatting, lint rules and the type checker (strict on the pure cores: [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The edit loop: lint and the unit tests (pure logic, no Ray), in well under a minute.
check: lint
	$(BIN)/python -m pytest -q tests/unit $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m jobs.bench $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
