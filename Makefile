# Tailfill: the two commands that matter are `make demo` and `make test` (see README).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

export SPARK_LOCAL_IP := 127.0.0.1
export AWS_EC2_METADATA_DISABLED := true
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: install demo test lint clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

## Run the main job on the embedded defaults: broker, sample data, backfill, tail, status.
demo: $(STAMP)
	$(VENV)/bin/tailfill broker down >/dev/null
	rm -rf .tailfill
	$(VENV)/bin/tailfill demo; status=$$?; $(VENV)/bin/tailfill broker down; exit $$status

## Run the whole test suite (unit + integration against real tansu, Spark, Iceberg, moto S3).
test: $(STAMP)
	$(VENV)/bin/ruff check tailfill spark_jobs tests
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check tailfill spark_jobs tests

clean:
	-$(VENV)/bin/tailfill broker down
	rm -rf .tailfill $(VENV) .pytest_cache
