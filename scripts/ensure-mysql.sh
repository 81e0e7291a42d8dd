#!/usr/bin/env bash
# ensure-mysql.sh makes sure the tests will find a MySQL-compatible server, in the order
# internal/mysqltest looks for one: MEND_TEST_DSN, a Docker engine, a local mariadbd/mysqld.
# As a last resort, when running as root on Debian/Ubuntu, it installs the mariadb-server
# package (without starting its system service: the tests start private servers themselves).
set -euo pipefail

if [[ -n "${MEND_TEST_DSN:-}" ]]; then
	echo "mend: tests use the server in MEND_TEST_DSN"
	exit 0
fi

docker_answers() {
	command -v docker >/dev/null 2>&1 || return 1
	if command -v timeout >/dev/null 2>&1; then
		timeout 10 docker info >/dev/null 2>&1
	else
		docker info >/dev/null 2>&1
	fi
}
if docker_answers; then
	echo "mend: tests use a Docker container (${MEND_TEST_IMAGE:-mysql:8.4})"
	exit 0
fi

find_server() {
	local name dir
	for name in mariadbd mysqld; do
		if command -v "$name" 2>/dev/null; then
			return 0
		fi
		for dir in /usr/sbin /usr/local/sbin /usr/local/bin /usr/local/mysql/bin; do
			if [[ -x "$dir/$name" ]]; then
				echo "$dir/$name"
				return 0
			fi
		done
	done
	return 1
}
if bin="$(find_server)"; then
	echo "mend: tests start private servers from $bin"
	exit 0
fi

is_debian() {
	[[ -f /etc/debian_version ]] && return 0
	[[ -r /etc/os-release ]] && grep -Eq '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release
}
if [[ "$(id -u)" -eq 0 ]] && is_debian && command -v apt-get >/dev/null 2>&1; then
	echo "mend: no MySQL-compatible server found; installing mariadb-server (Debian package)..."
	# Keep the package from starting a system service (policy-rc.d exit 101 = "not allowed").
	policy=/usr/sbin/policy-rc.d
	if [[ ! -e "$policy" ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null
	if bin="$(find_server)"; then
		echo "mend: installed; tests start private servers from $bin"
		exit 0
	fi
	echo "mend: mariadb-server installed but no mariadbd/mysqld binary found" >&2
	exit 1
fi

cat >&2 <<'MSG'
mend: the tests need a MySQL-compatible server and none was found. Either set MEND_TEST_DSN to an
existing server (a go-sql-driver DSN such as root:secret@tcp(127.0.0.1:3306)/ whose user may create
and drop databases), or start a Docker engine (the tests run mysql:8.4; set MEND_TEST_IMAGE to use
another image such as mariadb:10.11), or install a server package that provides mariadbd or mysqld
(Debian/Ubuntu: apt-get install mariadb-server; Fedora: dnf install mariadb-server; macOS:
brew install mariadb). The tests start their own private server from that binary; no system
service needs to run.
MSG
exit 1
