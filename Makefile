# Two entry points matter: `make demo` (the main job) and `make test` (the whole suite, as CI runs it).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck docs pytest pytest-pure compiled-check kafka-fetch bench clean

# The modules compiled with mypyc and Cython (aioproducer/speedups.py names them): editing
# one reinstalls, which compiles them again.
HOT_SOURCES := $(shell $(PYTHON) -c "import runpy; m = runpy.run_path('aioproducer/speedups.py'); print(' '.join([n.replace('.', '/') + '.py' for n in m['HOT_MODULES']] + [n.replace('.', '/') + '.pyx' for n in m['EXTENSIONS']]))")

$(STAMP): pyproject.toml setup.py aioproducer/speedups.py $(HOT_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

# Every Apache Kafka release the test suite runs (tests/versions/ names the same list): each
# is fetched once with Maven into ~/.cache/aioproducer (~50 s a version on a fresh machine).
KAFKA_VERSIONS := 3.3.2 3.6.2 3.9.1 4.0.1 4.3.1 4.4.0

kafka-fetch: $(STAMP)
	$(PY) -m aioproducer.testing.kafka fetch
	for v in $(KAFKA_VERSIONS); do $(PY) -m aioproducer.testing.kafka fetch --kafka-version $$v || exit 1; done

demo: $(STAMP) kafka-fetch
	$(PY) -m aioproducer demo

LINT_DIRS := $(wildcard aioproducer tests examples bench setup.py)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/ruff format --check $(LINT_DIRS)

typecheck: $(STAMP)
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict examples

# Two workers (pytest-xdist): the broker tests in lanes, "broker", "spark" and
# "standalone" (see tests/conftest.py), each lane serial on one worker; every other test
# goes wherever a worker is free.
pytest: $(STAMP) kafka-fetch
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadgroup --durations=30

# The documentation site, into site/; --strict turns a broken link, an unresolved reference
# or a public name without a docstring into a failure.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Where a C compiler exists the install must have compiled the hot path and the column
# encoder: fail if it silently did not.
compiled-check: $(STAMP)
	$(PY) -m aioproducer info --require-compiled

# The pure-Python hot path (what installs without a compiler) once more, on the fast
# unit-level tests of the code around it; the broker tests above ran compiled. Of
# tests/protocol, the record encoder's (protocol/record_encoder.py is compiled): ~20 s,
# where the whole folder would take ~2 min to repeat tests of modules that never are.
pytest-pure: $(STAMP)
	AIOPRODUCER_PURE_PYTHON=1 $(PY) -m pytest -p no:cacheprovider -m "not broker" \
		tests/producer tests/sync tests/fake/test_adaptive_partitioning.py \
		tests/protocol/test_records.py tests/protocol/test_records_bulk.py tests/protocol/test_records_columnar.py \
		tests/protocol/test_fuzz_decoders.py

test: lint typecheck docs compiled-check pytest pytest-pure

bench: $(STAMP) kafka-fetch
	$(PY) -m bench

clean:
	rm -rf $(VENV) site build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	rm -f aioproducer/speedups.json aioproducer__mypyc*.so
	find aioproducer -name '*.so' -delete
