#!/usr/bin/env bash
# mysql-rootfs.sh gives the local-binary test backend a server Debian 12's packages do not
# offer: Debian unstable's mysql-server (Oracle MySQL), or its mariadb-server (MariaDB 11.8), in
# a root file system under the user's cache directory, and a wrapper that runs the server through
# the root file system's own dynamic loader and libraries (no chroot, no root needed to run it),
# pointing it at its own messages, character sets and plugins.
#
#   mysql-rootfs.sh [mysql|mariadb-11.8]   prints the wrapper's path, building what is missing
#                                          (engine default: mysql)
#
# The root file system comes from the engine's test image when Docker has it (docker export,
# about 20 s), else from scripts/build-test-image.sh ENGINE --rootfs-dir (debootstrap; root,
# minutes). internal/localdb finds the wrapper when MEND_TEST_ENGINE names that engine and no
# server binary of it is on PATH. For MariaDB the wrapper directory is also the --basedir
# mariadb-install-db needs: sbin/mariadbd, bin/my_print_defaults and bin/resolveip run through the loader,
# bin/mariadb-install-db is the root file system's script, share/ and lib/mysql/plugin link
# into the root file system.
set -euo pipefail
cd "$(dirname "$0")"
engine="${1:-mysql}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mend"
case "$engine" in
mysql)
	dest="$cache/rootfs/mysql"
	wrapper="$cache/rootfs/mysql-bin/mysqld"
	image=mend-test/mysql:sid
	server=usr/sbin/mysqld
	;;
mariadb-11.8)
	dest="$cache/rootfs/$engine"
	wrapper="$cache/rootfs/$engine-bin/sbin/mariadbd"
	image=mend-test/mariadb:11.8
	server=usr/sbin/mariadbd
	;;
*) echo "usage: $0 [mysql|mariadb-11.8]" >&2; exit 2 ;;
esac

if [[ ! -x "$dest/$server" ]]; then
	mkdir -p "$cache"
	exec 9>"$cache/image-build.lock"
	flock 9
fi
if [[ ! -x "$dest/$server" ]]; then
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
		bash ./build-test-image.sh "$engine" --rootfs-dir "$dest" >&2
	fi
fi

loader="$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
[[ -x "$loader" ]] || loader="$dest/lib64/ld-linux-x86-64.so.2"
libs="\$R/usr/lib/x86_64-linux-gnu:\$R/lib/x86_64-linux-gnu:\$R/usr/lib/mysql/private"
mkdir -p "$(dirname "$wrapper")"
if [[ "$engine" == mysql ]]; then
	cat >"$wrapper.tmp" <<WRAP
#!/bin/sh
# Runs the mysqld of $dest through its own loader and libraries (written by scripts/mysql-rootfs.sh).
R='$dest'
pre=""
if [ "\${1:-}" = "--no-defaults" ]; then pre="\$1"; shift; fi # it must stay the first option
exec "$loader" --library-path "$libs" \\
	"\$R/usr/sbin/mysqld" \$pre --lc-messages-dir="\$R/usr/share/mysql" \\
	--character-sets-dir="\$R/usr/share/mysql/charsets" --plugin-dir="\$R/usr/lib/mysql/plugin" "\$@"
WRAP
else
	base="$(dirname "$(dirname "$wrapper")")"
	# The server's own directories come after the caller's options: mariadb-install-db passes
	# --plugin-dir and --basedir of the wrapper directory, where they are links into the rootfs.
	cat >"$wrapper.tmp" <<WRAP
#!/bin/sh
# Runs the mariadbd of $dest through its own loader and libraries (written by scripts/mysql-rootfs.sh).
R='$dest'
pre=""
if [ "\${1:-}" = "--no-defaults" ]; then pre="\$1"; shift; fi # it must stay the first option
exec "$loader" --library-path "$libs" "\$R/usr/sbin/mariadbd" \$pre "\$@" \\
	--lc-messages-dir="\$R/usr/share/mariadb" --character-sets-dir="\$R/usr/share/mariadb/charsets" \\
	--plugin-dir="\$R/usr/lib/mysql/plugin"
WRAP
	mkdir -p "$base/bin" "$base/lib/mysql"
	for tool in my_print_defaults resolveip; do
		cat >"$base/bin/$tool.tmp" <<WRAP
#!/bin/sh
R='$dest'
exec "$loader" --library-path "$libs" "\$R/usr/bin/$tool" "\$@"
WRAP
		chmod 755 "$base/bin/$tool.tmp"
		mv "$base/bin/$tool.tmp" "$base/bin/$tool"
	done
	cp "$dest/usr/bin/mariadb-install-db" "$base/bin/mariadb-install-db"
	ln -sfn "$dest/usr/share" "$base/share"
	ln -sfn "$dest/usr/lib/mysql/plugin" "$base/lib/mysql/plugin"
fi
chmod 755 "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
"$wrapper" --version >&2
echo "$wrapper"
