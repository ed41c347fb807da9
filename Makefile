# Two entry points matter: `make demo` (the main job) and `make test` (the whole suite, as CI runs it).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck docs pytest kafka-fetch bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

kafka-fetch: $(STAMP)
	$(PY) -m aioproducer.testing.kafka fetch

demo: $(STAMP) kafka-fetch
	$(PY) -m aioproducer demo

LINT_DIRS := $(wildcard aioproducer tests examples bench)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/ruff format --check $(LINT_DIRS)

typecheck: $(STAMP)
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict examples

pytest: $(STAMP) kafka-fetch
	$(PY) -m pytest -p no:cacheprovider

# The documentation site, into site/; --strict turns a broken link, an unresolved reference
# or a public name without a docstring into a failure.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

test: lint typecheck docs pytest

bench: $(STAMP) kafka-fetch
	$(PY) -m bench

clean:
	rm -rf $(VENV) site build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
