#!/usr/bin/env bash
# build-test-image.sh builds one of mend's test images from Debian's packages, with no container
# registry: a debootstrap --variant=minbase root file system, the server package installed inside
# it, trimmed, imported with `docker import`, and finished by scripts/test-image/Dockerfile
# (entrypoint, port, data directory volume).
#
#   build-test-image.sh [mariadb|mariadb-11.8|mysql] [--force]  (engine default: $MEND_TEST_ENGINE, else mariadb)
#   build-test-image.sh mysql --rootfs-dir DIR         (the trimmed root file system only, into DIR, no Docker;
#                                                      scripts/mysql-rootfs.sh uses it on machines without Docker;
#                                                      mariadb-11.8 too)
#
#   mariadb  this machine's Debian release with mariadb-server (MariaDB 10.11 on Debian 12), tagged
#            mend-test/mariadb:debian-<VERSION_ID>
#   mysql    Debian unstable (sid) with mysql-server (Oracle MySQL 9.7), tagged
#            mend-test/mysql:<major.minor of the installed mysqld>, and also mend-test/mysql:sid (the
#            tag the harness looks for before it knows the version)
#   mariadb-11.8  Debian unstable (sid) with mariadb-server (MariaDB 11.8 LTS), tagged
#            mend-test/mariadb:11.8; the build fails if sid's mariadb-server is not 11.8.x (a
#            newer sid would need a new engine name, not a silently different server)
#
# The package mirror is read from this machine's own apt configuration. A second run finds the tag
# and does nothing; --force rebuilds. Builds take an exclusive lock (flock on a file under the
# user's cache directory), so two `make test` runs started together build once: the second waits,
# then finds the image. Needs root (debootstrap, chroot) and a Docker engine; installs debootstrap
# when it is missing.
set -euo pipefail
cd "$(dirname "$0")"

engine="${MEND_TEST_ENGINE:-mariadb}"
force=0
rootfs_dir=""
while [[ $# -gt 0 ]]; do
	case "$1" in
	--force) force=1 ;;
	--rootfs-dir) rootfs_dir="${2:?--rootfs-dir needs a directory}"; shift ;;
	mariadb | mariadb-11.8 | mysql) engine="$1" ;;
	*) echo "usage: $0 [mariadb|mariadb-11.8|mysql] [--force] [--rootfs-dir DIR]" >&2; exit 2 ;;
	esac
	shift
done

. /etc/os-release
case "$engine" in
mariadb)
	suite="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
	package=mariadb-server
	tag="mend-test/mariadb:debian-${VERSION_ID:?no VERSION_ID in /etc/os-release}"
	;;
mariadb-11.8)
	suite=sid
	package=mariadb-server
	tag="mend-test/mariadb:11.8"
	;;
mysql)
	suite=sid
	package=mysql-server
	tag="mend-test/mysql:sid"
	;;
*) echo "mend: unknown engine $engine (want mariadb, mariadb-11.8 or mysql)" >&2; exit 2 ;;
esac

have() { [[ -z "$rootfs_dir" ]] && docker image inspect "$1" >/dev/null 2>&1; }
if [[ -n "$rootfs_dir" && -e "$rootfs_dir" ]]; then
	echo "mend: $rootfs_dir exists; remove it to build the root file system again" >&2
	exit 1
fi
if [[ $force -eq 0 ]] && have "$tag"; then
	echo "mend: test image $tag is present"
	exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
	echo "mend: building $tag needs root (debootstrap and chroot); run as root or set MEND_TEST_IMAGE" >&2
	exit 1
fi

# One build at a time on this machine, whichever clone or engine asks: the second caller waits
# here, then finds the image the first one built (no duplicate build, no dangling image).
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mend"
mkdir -p "$cache"
exec 9>"$cache/image-build.lock"
if ! flock -n 9; then
	echo "mend: another test image build is running; waiting for it (lock $cache/image-build.lock)"
	flock 9
fi
if [[ $force -eq 0 ]] && have "$tag"; then
	echo "mend: test image $tag is present (built by the run we waited for)"
	exit 0
fi

# The first Debian mirror this machine's apt uses (deb822 .sources files, then sources.list).
mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f "$f" ]] || continue
		uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
		if [[ -n "$uri" && "$uri" != *security* ]]; then echo "$uri"; return 0; fi
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f "$f" ]] || continue
		uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f")
		if [[ -n "$uri" ]]; then echo "$uri"; return 0; fi
	done
	return 1
}
url="$(mirror)" || { echo "mend: no Debian mirror found in /etc/apt; cannot build $tag" >&2; exit 1; }

if ! command -v debootstrap >/dev/null 2>&1; then
	echo "mend: installing debootstrap (Debian package) to build the test image..."
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

begin=$(date +%s)
work="$(mktemp -d /tmp/mend-test-image.XXXXXX)"
base="mend-test/$engine-rootfs:build-$$"
cleanup() {
	for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
	rm -rf "$work"
	docker rmi "$base" >/dev/null 2>&1 || true
}
trap cleanup EXIT
root="$work/rootfs"

echo "mend: building $tag from Debian $suite packages (debootstrap, then $package); takes a few minutes once..."
debootstrap --variant=minbase "$suite" "$root" "$url" >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Install the server inside, with services kept from starting (policy-rc.d exit 101). The snapshot
# a machine is served may carry a Release file past its Valid-Until date (seen with sid here), so
# that check is off; it changes nothing where the date is fine.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$root/proc"
chroot "$root" /bin/sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq &&
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $package >/dev/null &&
	apt-get clean" >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; exit 1; }

if [[ "$engine" == mysql ]]; then
	version=$(chroot "$root" /usr/sbin/mysqld --version | sed -n 's/.*Ver \([0-9][0-9]*\.[0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1/p')
	[[ -n "$version" ]] || { echo "mend: cannot read the mysqld version in $root" >&2; exit 1; }
	# An initialised data directory baked into the image: a container copies it onto its empty
	# volume instead of running --initialize-insecure (several seconds) at every start.
	mkdir -p "$root/opt/mend"
	chroot "$root" /usr/sbin/mysqld --no-defaults --initialize-insecure --user=root \
		--datadir=/opt/mend/mysql-template --log-error=/tmp/init.err \
		>"$work/init.log" 2>&1 || { cat "$work/init.log" "$root/tmp/init.err" >&2; exit 1; }
	rm -f "$root/tmp/init.err"
fi
if [[ "$engine" == mariadb-* ]]; then
	want="${engine#mariadb-}"
	got=$(chroot "$root" /usr/sbin/mariadbd --version | sed -n 's/.*Ver \([0-9][0-9]*\.[0-9][0-9]*\)\.[0-9].*MariaDB.*/\1/p')
	if [[ "$got" != "$want" ]]; then
		echo "mend: Debian $suite's $package is MariaDB ${got:-of an unknown version}, not $want: cannot build $tag" >&2
		exit 1
	fi
fi
umount -l "$root/proc"

# Trim what a test server never reads: documentation, manuals, locales, apt's lists and caches.
rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"* "$root/usr/share/doc/"* "$root/usr/share/man/"* \
	"$root/usr/share/info/"* "$root/usr/share/lintian" "$root/var/log/"*.log "$root/var/lib/mysql/"* \
	"$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' -exec rm -rf {} + 2>/dev/null || true

if [[ -n "$rootfs_dir" ]]; then
	mkdir -p "$(dirname "$rootfs_dir")"
	mv "$root" "$rootfs_dir"
	echo "mend: built the $package root file system in $rootfs_dir in $(($(date +%s) - begin))s"
	exit 0
fi

old_id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true) # --force: removed below, not left dangling
tar -C "$root" -c . | docker import -m "mend test image root file system (debootstrap $suite + $package)" - "$base" >/dev/null
docker build -q --build-arg "BASE=$base" --build-arg "ENGINE=${engine%%-*}" -t "$tag" test-image >"$work/build.log" 2>&1 ||
	{ cat "$work/build.log" >&2; exit 1; }
if [[ "$engine" == mysql ]]; then
	docker tag "$tag" "mend-test/mysql:$version"
	tag="$tag and mend-test/mysql:$version"
fi
new_id=$(docker image inspect -f '{{.Id}}' "${tag%% *}")
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	docker rmi "$old_id" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "${tag%% *}")
echo "mend: built $tag in $(($(date +%s) - begin))s ($((size / 1000000)) MB)"
