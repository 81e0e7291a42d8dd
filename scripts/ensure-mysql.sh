#!/usr/bin/env bash
# ensure-mysql.sh makes sure the tests (and the demo) will find a MySQL-compatible server of the
# engine they will ask for, in the order internal/testserver looks for one: MEND_TEST_DSN; a
# Docker engine with an image (for MySQL: mysql:8.4 where a registry answers, else the image
# scripts/build-test-image.sh builds from Debian unstable's mysql-server; for MariaDB: the image
# it builds from this machine's Debian mariadb-server), built once here when missing; a local
# server binary. As a last resort, as root on Debian/Ubuntu, it installs mariadb-server (without
# starting its system service: the tests start private servers themselves).
# MEND_TEST_BACKEND=dsn|docker|local limits it to that backend, as it limits the harness;
# MEND_TEST_ENGINE=mysql|mariadb|mariadb-11.8 picks the engine (default mysql; unset, a machine
# that cannot have MySQL falls back to MariaDB, as the harness does). mariadb-11.8 is Debian
# unstable's MariaDB 11.8: the image build-test-image.sh mariadb-11.8 builds (mariadb:11.8 where a
# registry answers), else a local mariadbd 11.8.x, else the root file system mysql-rootfs.sh
# mariadb-11.8 provides.
set -euo pipefail
cd "$(dirname "$0")"
backend="${MEND_TEST_BACKEND:-}"
engine="${MEND_TEST_ENGINE:-}"
explicit=1
if [[ -z "$engine" ]]; then
	engine=mysql
	explicit=0
fi
case "$engine" in
mysql | mariadb | mariadb-11.8) ;;
*) echo "mend: MEND_TEST_ENGINE=$engine: want mysql, mariadb or mariadb-11.8" >&2; exit 2 ;;
esac

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
	if [[ -n "${MEND_TEST_IMAGE:-}" ]]; then
		echo "mend: tests use Docker containers of ${MEND_TEST_IMAGE} (MEND_TEST_IMAGE)"
		exit 0
	fi
	# image_for ENGINE: the first image of that engine present or obtainable, else fails.
	image_for() {
		local built registry
		if [[ "$1" == mysql ]]; then
			built="mend-test/mysql:sid" registry="mysql:8.4"
			if have_image "$registry"; then echo "$registry"; return 0; fi
		elif [[ "$1" == mariadb-11.8 ]]; then
			built="mend-test/mariadb:11.8" registry="mariadb:11.8"
		else
			built="mend-test/mariadb:debian-${VERSION_ID:-none}" registry="mariadb:10.11"
		fi
		if have_image "$built"; then echo "$built"; return 0; fi
		if have_image "$registry"; then echo "$registry"; return 0; fi
		if timeout 600 docker pull -q "$registry" >/dev/null 2>&1; then echo "$registry"; return 0; fi
		if [[ "${ID:-}" == debian && "$(id -u)" -eq 0 ]] && bash ./build-test-image.sh "$1" >&2; then
			echo "$built"
			return 0
		fi
		return 1
	}
	if image="$(image_for "$engine")"; then
		echo "mend: tests use Docker containers of $image ($engine)"
		exit 0
	fi
	if [[ $explicit -eq 0 ]] && image="$(image_for mariadb)"; then
		echo "mend: no MySQL image could be had; tests use Docker containers of $image (MariaDB; set MEND_TEST_ENGINE to insist)"
		exit 0
	fi
	if [[ "$backend" == docker ]]; then
		echo "mend: MEND_TEST_BACKEND=docker, but no $engine image can be pulled or built here (run scripts/build-test-image.sh $engine as root on Debian, or set MEND_TEST_IMAGE)" >&2
		exit 1
	fi
	echo "mend: Docker answers but has no usable $engine image; falling back to a local server binary"
elif [[ "$backend" == docker ]]; then
	echo "mend: MEND_TEST_BACKEND=docker, but no Docker engine answers (docker info)" >&2
	exit 1
fi

# find_server ENGINE prints a server binary of that engine (Debian's mariadb-server installs
# mysqld as a link to mariadbd, which is not MySQL); for mariadb-11.8 only an 11.8.x.
find_server() {
	local name dir path
	local names=(mysqld) cached="${XDG_CACHE_HOME:-$HOME/.cache}/mend/rootfs/mysql-bin/mysqld"
	if [[ "$1" == mariadb* ]]; then
		names=(mariadbd mysqld) cached=""
		[[ "$1" == mariadb-11.8 ]] && cached="${XDG_CACHE_HOME:-$HOME/.cache}/mend/rootfs/mariadb-11.8-bin/sbin/mariadbd"
	fi
	for name in "${names[@]}"; do
	for path in "$(command -v "$name" 2>/dev/null)" /usr/sbin/$name "$cached" /usr/local/sbin/$name /usr/local/bin/$name /usr/local/mysql/bin/$name; do
			[[ -n "$path" && -x "$path" ]] || continue
			local version
			version="$("$path" --version 2>/dev/null || true)"
			if grep -qi mariadb <<<"$version"; then
				[[ "$1" == mariadb* ]] || continue
				if [[ "$1" == mariadb-* ]] && ! grep -q "Ver ${1#mariadb-}\." <<<"$version"; then
					continue
				fi
			else
				[[ "$1" == mysql ]] || continue
			fi
			echo "$path"
			return 0
		done
	done
	return 1
}
if bin="$(find_server "$engine")"; then
	echo "mend: tests start private $engine servers from $bin"
	exit 0
fi
# No MySQL binary on the machine: Debian unstable's, in a root file system under the cache
# directory (exported from the MySQL image if Docker has it, else built with debootstrap as root).
if [[ ( "$engine" == mysql || "$engine" == mariadb-11.8 ) && $explicit -eq 1 ]]; then
	if bin="$(bash ./mysql-rootfs.sh "$engine")"; then
		echo "mend: tests start private mysql servers from $bin"
		exit 0
	fi
fi
if [[ $explicit -eq 0 ]] && bin="$(find_server mariadb)"; then
	echo "mend: no MySQL server binary; tests start private MariaDB servers from $bin (set MEND_TEST_ENGINE to insist)"
	exit 0
fi
if [[ $explicit -eq 1 && "$engine" == mysql ]]; then
	echo "mend: MEND_TEST_ENGINE=mysql, but no Docker image and no MySQL mysqld binary (install mysql-server, or run Docker)" >&2
	exit 1
fi
if [[ "$engine" == mariadb-11.8 ]]; then
	echo "mend: MEND_TEST_ENGINE=mariadb-11.8, but no Docker image and no MariaDB 11.8 mariadbd (run scripts/build-test-image.sh mariadb-11.8 as root on Debian, or install MariaDB 11.8)" >&2
	exit 1
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
	if bin="$(find_server mariadb)"; then
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
