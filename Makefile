# teamstore: `make demo` and `make test` are each the only command a fresh machine needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: venv demo test test-fast lint bench clean services

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The peers the benchmarks measure against (the `bench` extra), installed on top of the dev install.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $(BENCH_STAMP)

## The main job on the embedded default: SQLite + a local folder + no exporter, offline.
demo: venv
	$(VENV)/bin/teamstore demo

## Every suite: unit, conformance (SQLite and a real Postgres), S3 over HTTP, OTLP.
test: venv
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -x -m "not postgres and not s3 and not otlp"

lint: venv
	$(VENV)/bin/ruff check platform config_registry tests bench
	$(VENV)/bin/mypy

## Every benchmark, with LangGraph's and the OpenAI Agents SDK's stores beside teamstore (bench/README.md).
bench: $(BENCH_STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .teamstore .pytest_cache .mypy_cache .ruff_cache
