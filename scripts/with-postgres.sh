#!/usr/bin/env bash
# with-postgres.sh CMD [ARGS...]
#
# Runs CMD with TEST_DATABASE_URL exported, pointing at a usable PostgreSQL.
# The database is chosen in this order:
#
#   a. TEST_DATABASE_URL, if already set; else DATABASE_URL, if set.
#   b. A server answering on 127.0.0.1:5432 (database "test" if it exists,
#      otherwise "postgres"), user postgres, no password.
#   c. A private throwaway cluster built from the installed PostgreSQL
#      binaries in a temp dir, stopped and deleted when CMD exits.
#
# SLUICE_FORCE_THROWAWAY=1 skips a and b.
#
# Also exported:
#   SLUICE_PG_BINDIR   directory holding initdb/pg_ctl/postgres (if found)
#   SLUICE_PG_DATADIR  data directory of the throwaway cluster   (case c)
#   SLUICE_PG_PORT     TCP port of the throwaway cluster          (case c)
#   SLUICE_PG_SOCKDIR  unix socket directory of that cluster      (case c)
#   SLUICE_PG_OSUSER   OS user owning that cluster; pg_ctl must run as this
#                      user (it is "postgres" when the script runs as root)
# The throwaway cluster's settings are written to its postgresql.conf, so a
# plain `pg_ctl -D "$SLUICE_PG_DATADIR" -w start` (as SLUICE_PG_OSUSER)
# brings it back on the same port after a test has stopped it.
#
# The exit status of CMD is the exit status of this script.
set -euo pipefail

prog=with-postgres

if [[ $# -eq 0 ]]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi

# redact hides a password in a postgres URL or key=value connection string.
redact() {
	sed -E \
		-e 's#(://[^:/@?]*):[^@/?]*@#\1:***@#' \
		-e 's#([?&]password=)[^&]*#\1***#g' \
		-e 's#(password=)[^ ]*#\1***#g' <<<"$1"
}

# find_bindir prints the directory holding initdb and pg_ctl, or fails.
find_bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [[ -n $d && -x $d/initdb && -x $d/pg_ctl ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	fi
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n $d && -x $d/initdb && -x $d/pg_ctl ]]; then
		printf '%s\n' "$d"
		return 0
	fi
	# Non-Debian layouts (e.g. /usr/bin, /usr/local/pgsql/bin) via PATH.
	if d=$(command -v initdb 2>/dev/null) && [[ -x $(dirname "$d")/pg_ctl ]]; then
		dirname "$d"
		return 0
	fi
	return 1
}

# tool NAME prints the path of a client tool, preferring the found bindir.
tool() {
	if [[ -n $bindir && -x $bindir/$1 ]]; then
		printf '%s\n' "$bindir/$1"
	else
		command -v "$1" 2>/dev/null || return 1
	fi
}

# port_answers HOST PORT: does something accept TCP connections there?
port_answers() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

bindir=$(find_bindir || true)
if [[ -n $bindir ]]; then
	export SLUICE_PG_BINDIR=$bindir
fi

force=${SLUICE_FORCE_THROWAWAY:-}
[[ $force == 0 || $force == false ]] && force=

# --- a. an explicit URL ------------------------------------------------------
if [[ -z $force ]]; then
	for var in TEST_DATABASE_URL DATABASE_URL; do
		if [[ -n ${!var:-} ]]; then
			export TEST_DATABASE_URL=${!var}
			echo "$prog: using \$$var: $(redact "$TEST_DATABASE_URL")" >&2
			exec "$@"
		fi
	done
fi

# --- b. a server on 127.0.0.1:5432 -------------------------------------------
fallthrough_note=
if [[ -z $force ]]; then
	answering=
	isready_rc=3
	if isready=$(tool pg_isready); then
		# 0: accepting, 2: no response; anything else (e.g. Debian's
		# pg_wrapper without a client package) means "ask the socket".
		"$isready" -q -h 127.0.0.1 -p 5432 -t 3 2>/dev/null && isready_rc=0 || isready_rc=$?
	fi
	case $isready_rc in
	0) answering=1 ;;
	2) ;;
	*) port_answers 127.0.0.1 5432 && answering=1 ;;
	esac
	if [[ -n $answering ]]; then
		base=postgres://postgres@127.0.0.1:5432
		if psql=$(tool psql); then
			if [[ $("$psql" -X -At -d "$base/test?sslmode=disable" -c 'select 1' 2>/dev/null) == 1 ]]; then
				url=$base/test?sslmode=disable
			elif [[ $("$psql" -X -At -d "$base/postgres?sslmode=disable" -c 'select 1' 2>/dev/null) == 1 ]]; then
				url=$base/postgres?sslmode=disable
			else
				url=
				fallthrough_note=" (the server on 127.0.0.1:5432 refused user postgres without a password)"
			fi
		else
			# No psql to check with; "test" is the documented local setup.
			url=$base/test?sslmode=disable
		fi
		if [[ -n $url ]]; then
			export TEST_DATABASE_URL=$url
			echo "$prog: using the server on 127.0.0.1:5432: $url" >&2
			exec "$@"
		fi
	fi
fi

# --- c. a private throwaway cluster ------------------------------------------
if [[ -z $bindir ]]; then
	echo "$prog: PostgreSQL is not installed; install it with: apt-get install -y postgresql" >&2
	exit 1
fi

# as_owner CMD...: run CMD as the user that owns the cluster.
owner=$(id -un)
as_owner() {
	"$@"
}
if [[ $(id -u) -eq 0 ]]; then
	# PostgreSQL refuses to run as root.
	owner=postgres
	if ! id -u postgres >/dev/null 2>&1; then
		if command -v useradd >/dev/null 2>&1; then
			useradd -r -M -s /bin/sh postgres
		else
			adduser -S -H postgres >/dev/null
		fi
	fi
	if command -v runuser >/dev/null 2>&1; then
		as_owner() {
			runuser -u postgres -- "$@"
		}
	else
		as_owner() {
			local shell=/bin/sh
			[[ -x /bin/bash ]] && shell=/bin/bash
			su -s "$shell" postgres -c "$(printf '%q ' "$@")"
		}
	fi
fi

tmp=$(mktemp -d /tmp/sluice-pg.XXXXXX)
chmod 755 "$tmp"
datadir=$tmp/data
logfile=$tmp/postgres.log
started=

cleanup() {
	trap - EXIT INT TERM HUP
	if [[ -n $started ]]; then
		if ! (cd "$tmp" && as_owner "$bindir/pg_ctl" -D "$datadir" -m immediate -w -t 30 stop) >/dev/null 2>&1; then
			# pg_ctl failed; kill the postmaster directly if it is still there.
			local pid
			pid=$(head -n 1 "$datadir/postmaster.pid" 2>/dev/null || true)
			if [[ $pid =~ ^[0-9]+$ ]]; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
		fi
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

if [[ $owner != "$(id -un)" ]]; then
	chown "$owner" "$tmp"
fi

# port_free PORT: nothing listens on PORT (TCP, any address).
port_free() {
	if command -v ss >/dev/null 2>&1; then
		! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
	else
		! port_answers 127.0.0.1 "$1"
	fi
}

# Run everything from the temp dir: the cluster owner may not be able to
# enter the caller's working directory.
if ! (cd "$tmp" && as_owner "$bindir/initdb" -D "$datadir" -A trust -U postgres \
	--no-sync -E UTF8 --locale=C) >"$tmp/initdb.log" 2>&1; then
	echo "$prog: initdb failed:" >&2
	cat "$tmp/initdb.log" >&2
	exit 1
fi

port=55432
attempt=0
while :; do
	while ! port_free "$port"; do
		port=$((port + 1))
		if ((port > 65535)); then
			echo "$prog: no free TCP port from 55432 upwards" >&2
			exit 1
		fi
	done
	# Keep the settings in postgresql.conf too, so a bare `pg_ctl start`
	# after a test-driven stop comes back identically.
	as_owner sh -c 'cat >>"$1"' _ "$datadir/postgresql.conf" <<EOF

# written by scripts/with-postgres.sh
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
	if (cd "$tmp" && as_owner "$bindir/pg_ctl" -D "$datadir" -l "$logfile" -w -t 60 \
		-o "-p $port -k $tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
		start) >/dev/null 2>&1; then
		started=1
		break
	fi
	# Somebody may have grabbed the port between the probe and the start.
	attempt=$((attempt + 1))
	if ((attempt >= 5)); then
		echo "$prog: could not start a throwaway PostgreSQL; server log:" >&2
		tail -n 30 "$logfile" >&2 || true
		exit 1
	fi
	# A failed start may still have left a postmaster behind; be sure.
	(cd "$tmp" && as_owner "$bindir/pg_ctl" -D "$datadir" -m immediate -w stop) >/dev/null 2>&1 || true
	port=$((port + 1))
done

export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
export SLUICE_PG_DATADIR=$datadir
export SLUICE_PG_PORT=$port
export SLUICE_PG_SOCKDIR=$tmp
export SLUICE_PG_OSUSER=$owner
echo "$prog: using a throwaway PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $datadir, removed on exit)$fallthrough_note" >&2

set +e
"$@"
rc=$?
set -e
exit "$rc"
