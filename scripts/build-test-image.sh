#!/usr/bin/env bash
# build-test-image.sh builds mend's MariaDB test image from Debian's packages, with no container
# registry: a debootstrap --variant=minbase root file system of this machine's Debian release,
# mariadb-server installed inside it, imported with `docker import`, and finished by
# scripts/test-image/Dockerfile (entrypoint, port, data directory volume).
#
# The package mirror is read from this machine's own apt configuration. The image is tagged
# mend-test/mariadb:debian-<VERSION_ID> (the tag internal/mysqltest looks for), so a second
# run finds it and does nothing. Pass --force to rebuild. Needs root (debootstrap, chroot) and a
# Docker engine; installs debootstrap when it is missing.
set -euo pipefail
cd "$(dirname "$0")"

force=0
[[ "${1:-}" == "--force" ]] && force=1

. /etc/os-release
codename="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
tag="mend-test/mariadb:debian-${VERSION_ID:?no VERSION_ID in /etc/os-release}"

if [[ $force -eq 0 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
	echo "mend: test image $tag is present"
	exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
	echo "mend: building $tag needs root (debootstrap and chroot); run as root or set MEND_TEST_IMAGE" >&2
	exit 1
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
cleanup() {
	for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
root="$work/rootfs"

echo "mend: building $tag from Debian $codename packages (debootstrap, then mariadb-server); takes a few minutes once..."
debootstrap --variant=minbase "$codename" "$root" "$url" >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Install mariadb-server inside, with services kept from starting (policy-rc.d exit 101).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$root/proc"
chroot "$root" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null && apt-get clean' \
	>"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; exit 1; }
umount -l "$root/proc"
rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc/"* "$root/usr/share/man/"* "$root/var/lib/mysql/"* \
	"$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"

base="mend-test/mariadb-rootfs:debian-$VERSION_ID"
tar -C "$root" -c . | docker import -m "mend test image root file system (debootstrap $codename + mariadb-server)" - "$base" >/dev/null
docker build -q --build-arg "BASE=$base" -t "$tag" test-image >"$work/build.log" 2>&1 ||
	{ cat "$work/build.log" >&2; exit 1; }
docker rmi "$base" >/dev/null 2>&1 || true
echo "mend: built $tag in $(( $(date +%s) - begin ))s"
