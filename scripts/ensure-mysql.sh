#!/usr/bin/env bash
# ensure-mysql.sh makes sure the tests (and the demo) will find a MySQL-compatible server, in
# the order internal/testserver looks for one: MEND_TEST_DSN; a Docker engine with an image
# (mysql:8.4 where a registry answers, else the MariaDB image scripts/build-test-image.sh builds
# from Debian packages, which this script builds once when it is missing); a local
# mariadbd/mysqld. As a last resort, as root on Debian/Ubuntu, it installs mariadb-server
# (without starting its system service: the tests start private servers themselves).
# MEND_TEST_BACKEND=dsn|docker|local limits it to that backend, as it limits the harness.
set -euo pipefail
cd "$(dirname "$0")"
backend="${MEND_TEST_BACKEND:-}"

if [[ "$backend" == dsn || ( -z "$backend" && -n "${MEND_TEST_DSN:-}" ) ]]; then
	echo "mend: tests use the server in MEND_TEST_DSN"
	exit 0
fi

docker_answers() {
	command -v docker >/dev/null 2>&1 || return 1
	timeout 10 docker info >/dev/null 2>&1
}
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [[ "$backend" != local ]] && docker_answers; then
	. /etc/os-release
	built="mend-test/mariadb:debian-${VERSION_ID:-none}"
	if [[ -n "${MEND_TEST_IMAGE:-}" ]]; then
		echo "mend: tests use Docker containers of ${MEND_TEST_IMAGE} (MEND_TEST_IMAGE)"
		exit 0
	fi
	if have_image mysql:8.4; then
		echo "mend: tests use Docker containers of mysql:8.4"
		exit 0
	fi
	if have_image "$built"; then
		echo "mend: tests use Docker containers of $built (built here; no registry needed)"
		exit 0
	fi
	if timeout 600 docker pull -q mysql:8.4 >/dev/null 2>&1; then
		echo "mend: tests use Docker containers of mysql:8.4 (pulled)"
		exit 0
	fi
	if [[ "${ID:-}" == debian && "$(id -u)" -eq 0 ]] && bash ./build-test-image.sh; then
		echo "mend: tests use Docker containers of $built"
		exit 0
	fi
	if [[ "$backend" == docker ]]; then
		echo "mend: MEND_TEST_BACKEND=docker, but mysql:8.4 cannot be pulled and $built could not be built (run scripts/build-test-image.sh as root on Debian, or set MEND_TEST_IMAGE)" >&2
		exit 1
	fi
	echo "mend: Docker answers but has no usable image; falling back to a local mariadbd/mysqld"
elif [[ "$backend" == docker ]]; then
	echo "mend: MEND_TEST_BACKEND=docker, but no Docker engine answers (docker info)" >&2
	exit 1
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
and drop databases), or start a Docker engine (the tests run mysql:8.4 where a registry answers, or
an image built by scripts/build-test-image.sh on Debian; MEND_TEST_IMAGE overrides), or install a
server package that provides mariadbd or mysqld (Debian/Ubuntu: apt-get install mariadb-server;
Fedora: dnf install mariadb-server; macOS: brew install mariadb). No system service needs to run.
MSG
exit 1
