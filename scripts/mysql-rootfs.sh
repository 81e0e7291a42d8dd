#!/usr/bin/env bash
# mysql-rootfs.sh gives the local-binary test backend an Oracle MySQL on a machine whose packages
# offer only MariaDB (Debian 12): Debian unstable's mysql-server in a root file system under the
# user's cache directory, and a wrapper that runs its mysqld through the root file system's own
# dynamic loader and libraries (no chroot, no root needed to run it), pointing it at its own
# messages, character sets and plugins.
#
#   mysql-rootfs.sh      prints the wrapper's path, building what is missing
#
# The root file system comes from the MySQL test image when Docker has it (docker export, about
# 20 s), else from scripts/build-test-image.sh mysql --rootfs-dir (debootstrap; root, minutes).
# internal/localdb finds the wrapper when MEND_TEST_ENGINE=mysql and no mysqld is on PATH.
set -euo pipefail
cd "$(dirname "$0")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mend"
dest="$cache/rootfs/mysql"
wrapper="$cache/rootfs/mysql-bin/mysqld"
image=mend-test/mysql:sid

if [[ ! -x "$dest/usr/sbin/mysqld" ]]; then
	mkdir -p "$cache"
	exec 9>"$cache/image-build.lock"
	flock 9
fi
if [[ ! -x "$dest/usr/sbin/mysqld" ]]; then
	rm -rf "$dest.tmp"
	if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1 &&
		docker image inspect "$image" >/dev/null 2>&1; then
		echo "mend: exporting $image into $dest ..." >&2
		mkdir -p "$dest.tmp"
		cid=$(docker create "$image")
		trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
		docker export "$cid" | tar -x -C "$dest.tmp"
		mv "$dest.tmp" "$dest"
	else
		flock -u 9 # build-test-image.sh takes the same lock
		bash ./build-test-image.sh mysql --rootfs-dir "$dest" >&2
	fi
fi

loader="$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
[[ -x "$loader" ]] || loader="$dest/lib64/ld-linux-x86-64.so.2"
mkdir -p "$(dirname "$wrapper")"
cat >"$wrapper.tmp" <<WRAP
#!/bin/sh
# Runs the mysqld of $dest through its own loader and libraries (written by scripts/mysql-rootfs.sh).
R='$dest'
pre=""
if [ "\${1:-}" = "--no-defaults" ]; then pre="\$1"; shift; fi # it must stay the first option
exec "$loader" --library-path "\$R/usr/lib/x86_64-linux-gnu:\$R/lib/x86_64-linux-gnu:\$R/usr/lib/mysql/private" \\
	"\$R/usr/sbin/mysqld" \$pre --lc-messages-dir="\$R/usr/share/mysql" \\
	--character-sets-dir="\$R/usr/share/mysql/charsets" --plugin-dir="\$R/usr/lib/mysql/plugin" "\$@"
WRAP
chmod 755 "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
"$wrapper" --version >&2
echo "$wrapper"
