#!/usr/bin/env bash
# Make sure the local PostgreSQL (127.0.0.1:5432, database `test`) and Redis (127.0.0.1:6379)
# that the tests use are up; start them when they are not.
set -euo pipefail

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
for _ in $(seq 1 60); do
  if pg_isready -h 127.0.0.1 -p 5432 -q && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
      || createdb -h 127.0.0.1 -U postgres test
    exit 0
  fi
  sleep 1
done
echo "PostgreSQL or Redis did not come up" >&2
exit 1
