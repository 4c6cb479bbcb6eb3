#!/bin/sh
# Entrypoint of the tailfill Airflow image: prepare, then run the given command (`airflow ...`).
#
# Airflow's simple auth manager opens its passwords file read-write (it appends users it does not
# know yet, and opens it "r+" on every login), so the file cannot live on the read-only repo mount
# (/opt/tailfill): copy the repo's version ($TAILFILL_AIRFLOW_PASSWORDS) to the writable path the
# auth manager is pointed at ($AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE) on every start,
# so the repo file stays the one to edit.
set -e
if [ -n "${TAILFILL_AIRFLOW_PASSWORDS:-}" ] && [ -n "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-}" ]; then
    cp "$TAILFILL_AIRFLOW_PASSWORDS" "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
fi
exec "$@"
