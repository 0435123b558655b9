# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and
# install the project from pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/driver-review demo $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

# The edit loop: lint and the unit tests (pure logic, no Ray), in well under a minute.
check: lint
	$(BIN)/python -m pytest -q tests/unit $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m jobs.bench $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
