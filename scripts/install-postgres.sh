#!/usr/bin/env bash
# install-postgres.sh makes sure PostgreSQL 15's server binaries are in
# /usr/lib/postgresql/15/bin (Debian 12's postgresql-15 package), for
# `make bench-peers`'s River runs, which start their own throwaway cluster
# with initdb. It does nothing when they are there; prints the bin directory.
set -euo pipefail
bin=/usr/lib/postgresql/15/bin
if [ ! -x "$bin/postgres" ] || [ ! -x "$bin/initdb" ]; then
	"$(dirname "$0")/install-apt.sh" postgresql-15 >&2
fi
[ -x "$bin/postgres" ] || { echo "install-postgres.sh: $bin/postgres is missing after the install" >&2; exit 1; }
echo "$bin"
