# Tailfill: the two commands that matter are `make demo` and `make test` (see README).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PINS   := pyproject.toml setup.py tailfill/dev/jvm-jars.txt tailfill/dev/jvm-jars.lock
STAMP  := $(VENV)/.installed-$(shell cat $(PINS) | sha1sum | cut -c1-12)

export SPARK_LOCAL_IP := 127.0.0.1
export AWS_EC2_METADATA_DISABLED := true
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: install bench-deps demo test docs docs-gen lint airflow airflow-stop clean postgres-server

## The venv, then the pinned JVM jars (Apache Kafka for the embedded broker) from Maven Central into ~/.cache/tailfill:
## fetched here, once, never when a broker or a job starts.
$(STAMP): $(PINS)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	@command -v mvn >/dev/null || { echo "need Maven (mvn) to fetch the pinned JVM jars: apt-get install maven"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m tailfill.dev.jars fetch
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

## The peers' JVM jars for benchmarks/peers.py (a Kafka Connect worker, the Iceberg sink's plugin, Spark's Kafka
## source and Iceberg's Spark runtime for the installed pyspark's Spark version); the install never fetches them.
bench-deps: $(STAMP)
	$(PY) -m tailfill.dev.jars fetch bench-connect bench-iceberg-connect \
	  bench-spark-$$($(PY) -c 'import pyspark; print(".".join(pyspark.__version__.split(".")[:2]))')

## Run the main job on the embedded defaults: broker, sample data, backfill, tail, status. The broker keeps
## its topics (and the table its rows) in $TAILFILL_HOME, so a second demo adds to the first.
demo: $(STAMP)
	$(VENV)/bin/tailfill demo; status=$$?; $(VENV)/bin/tailfill broker down; \
	  $(VENV)/bin/tailfill connect-server down; exit $$status

## Run the whole test suite in two xdist workers, then the timing tests (marker solo) alone: unit +
## integration against real Apache Kafka, Spark, Iceberg, moto S3 and SeaweedFS, Postgres,
## Airflow, and Debian's headless Chromium for the UI test).
test: $(STAMP) /usr/bin/chromedriver postgres-server
	$(VENV)/bin/ruff check tailfill spark_jobs tests plugins dags benchmarks
	$(VENV)/bin/pytest -n 2 --dist loadfile -m "not solo and not soak" --durations=15
	$(VENV)/bin/pytest -m "solo and not soak"

/usr/bin/chromedriver:
	@[ "$$(id -u)" = 0 ] || { echo "the UI test needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver (as root)"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

## PostgreSQL server binaries (Debian's postgresql) for the Postgres catalog and Airflow metadata;
## tailfill.dev.postgres starts its own server from them, on loopback, and stops it.
postgres-server:
	@command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  [ "$$(id -u)" = 0 ] || { echo "Postgres is needed: apt-get install postgresql (as root)"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

## Start Airflow locally (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1:8080, login admin/admin,
## metadata on a local Postgres (LocalExecutor: backfill lanes run side by side).
airflow: $(STAMP) postgres-server
	PYTHONPATH=plugins $(PY) -m tailfill_airflow.local

## Stop the Airflow that `make airflow` started (from another shell; Ctrl-C in its own does the same): its
## components, the Spark Connect server, the embedded broker and Postgres it started. Returns once all stopped.
airflow-stop: $(STAMP)
	PYTHONPATH=plugins $(PY) -m tailfill_airflow.local --stop

## The docs site into site/ (open site/index.html): the generated parts first, then MkDocs with --strict,
## so a broken link or page fails. Offline: a built-in theme, nothing loaded from outside the site.
docs: docs-gen
	$(VENV)/bin/mkdocs build --strict --site-dir site

## The parts of docs/ generated from the code: the pipeline reference and schema, the errors page.
docs-gen: $(STAMP)
	$(PY) -m tailfill.dev.docs

lint: $(STAMP)
	$(VENV)/bin/ruff check tailfill spark_jobs tests plugins dags benchmarks

clean:
	-$(VENV)/bin/tailfill broker down
	-$(VENV)/bin/tailfill connect-server down
	rm -rf .tailfill $(VENV) .pytest_cache site
