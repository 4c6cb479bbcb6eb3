#!/bin/bash
# Runs once, when the postgres container starts on an empty data volume
# (/docker-entrypoint-initdb.d). Creates the stack's two databases, each owned by its own user;
# users and passwords come from the postgres service's environment in docker-compose.yml:
#   airflow  Airflow's metadata database   owner $AIRFLOW_DB_USER / $AIRFLOW_DB_PASSWORD
#   iceberg  the Iceberg SQL catalog       owner $ICEBERG_DB_USER / $ICEBERG_DB_PASSWORD
# tests/unit/test_compose.py reads this file to check the connection URIs against it.
set -e
: "${AIRFLOW_DB_USER:?}" "${AIRFLOW_DB_PASSWORD:?}" "${ICEBERG_DB_USER:?}" "${ICEBERG_DB_PASSWORD:?}"

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    --set=airflow_user="$AIRFLOW_DB_USER" --set=airflow_password="$AIRFLOW_DB_PASSWORD" \
    --set=iceberg_user="$ICEBERG_DB_USER" --set=iceberg_password="$ICEBERG_DB_PASSWORD" <<'SQL'
CREATE USER :"airflow_user" WITH PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER :"airflow_user";
CREATE USER :"iceberg_user" WITH PASSWORD :'iceberg_password';
CREATE DATABASE iceberg OWNER :"iceberg_user";
SQL
