#!/usr/bin/env bash
# vitess.sh gives the Vitess test backend (MEND_TEST_ENGINE=vitess, internal/vitessdb) what it
# runs: the pinned Vitess binaries, built once from the Go module proxy into the user's cache, and
# a folder of wrappers that run the MySQL root file system's programs through its own loader.
#
#   vitess.sh             prints the cache directory (VITESS_DIR below), building what is missing
#   vitess.sh --bins-only builds only the binaries (no MySQL root file system needed yet), so
#                         .ci/run can build them in the background while the other jobs run
#   vitess.sh --cluster   also builds what the multi-process cluster runs (vtctld vtgate vttablet;
#                         make test-vitess-failover, internal/vitesscluster); without it they are not
#                         built, so make test-vitess and CI do not wait for them
#
#   VITESS_DIR=~/.cache/mend/vitess-v0.24.4
#     bin/        vtcombo vttestserver mysqlctl vtctldclient (go build -trimpath, about 320 MB), and
#                 with --cluster, for the multi-process cluster (internal/vitesscluster): vtctld vtgate
#                 vttablet (about 360 MB more; a build that finds some binaries builds only the missing ones)
#     mysql/bin/  mysqld mysql mysqladmin mysqlbinlog wrappers (VT_MYSQL_ROOT=VITESS_DIR/mysql)
#     config/     a copy of Vitess's config/ (VTROOT=VITESS_DIR); mycnf/test-suite.cnf is rewritten
#                 for MySQL 9.7 (innodb_redo_log_capacity, not innodb_log_file_size)
#
# `go install vitess.io/vitess/...@v0.24.4` refuses (the module's go.mod has an exclude
# directive), so the module is downloaded, copied out of the module cache and built in place.
# The build runs under `nice -n 19` (minutes and about 1.2 GB on two cores); one build at a time
# on this machine (flock on VITESS_DIR.lock): a second caller waits, then finds the binaries.
# The MySQL root file system comes from scripts/mysql-rootfs.sh.
set -euo pipefail
cd "$(dirname "$0")"

version=v0.24.4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mend"
dir="$cache/vitess-$version"
bins=(vtcombo vttestserver mysqlctl vtctldclient)

built() {
	local b
	for b in "${bins[@]}"; do [[ -x "$dir/bin/$b" ]] || return 1; done
	[[ "$(head -c2 "$dir/bin/vtcombo")" != "#!" || -x "$dir/bin/vtcombo.bin" ]] || return 1
	[[ -f "$dir/config/mycnf/test-suite.cnf" && -x "$dir/mysql/bin/mysqlbinlog" ]]
}

bins_only=false
for arg in "$@"; do
	case $arg in
	--bins-only) bins_only=true ;;
	--cluster) bins+=(vtctld vtgate vttablet) ;;
	*) echo "usage: vitess.sh [--bins-only] [--cluster]" >&2; exit 2 ;;
	esac
done

mkdir -p "$cache"
if ! built; then
	exec 9>"$dir.lock"
	if ! flock -n 9; then
		echo "mend: another Vitess build is running; waiting for it (lock $dir.lock)" >&2
		flock 9
	fi
fi

# The MySQL root file system (and mysql-rootfs.sh's own mysqld wrapper, unused here).
$bins_only || bash ./mysql-rootfs.sh >/dev/null
rootfs="$cache/rootfs/mysql"

if ! built; then
	mkdir -p "$dir"
	missing=()
	for b in "${bins[@]}"; do
		[[ -x "$dir/bin/$b" ]] || { [[ $b == vtcombo && -x "$dir/bin/vtcombo.bin" ]]; } || missing+=("./go/cmd/$b")
	done
	if ((${#missing[@]} > 0)); then
		echo "mend: building Vitess $version (${missing[*]##*/}) into $dir/bin (nice -n 19; several minutes) ..." >&2
		moddir=$(go mod download -json "vitess.io/vitess@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[[ -d "$moddir" ]] || { echo "mend: go mod download gave no module directory" >&2; exit 1; }
		src="$dir/src.tmp"
		rm -rf "$src"
		cp -r "$moddir" "$src"
		chmod -R u+w "$src"
		start=$(date +%s)
		mkdir -p "$dir/bin.tmp"
		(cd "$src" && nice -n 19 go build -trimpath -o "$dir/bin.tmp/" "${missing[@]}")
		echo "mend: Vitess built in $(($(date +%s) - start)) s" >&2
		if [[ ! -f "$dir/config/mycnf/test-suite.cnf" ]]; then
			rm -rf "$dir/config.tmp"
			cp -r "$src/config" "$dir/config.tmp"
		fi
		rm -rf "$src"
		mkdir -p "$dir/bin"
		mv "$dir"/bin.tmp/* "$dir/bin/"
		rmdir "$dir/bin.tmp"
	fi
	if [[ ! -f "$dir/config/mycnf/test-suite.cnf" ]]; then
		[[ -d "$dir/config.tmp" ]] || {
			moddir=$(go mod download -json "vitess.io/vitess@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
			cp -r "$moddir/config" "$dir/config.tmp"
			chmod -R u+w "$dir/config.tmp"
		}
		# MySQL 9.7 removed innodb_log_file_size; its replacement sizes the whole redo log.
		sed -i 's/^innodb_log_file_size[[:space:]]*=.*$/innodb_redo_log_capacity = 128M/' "$dir/config.tmp/mycnf/test-suite.cnf"
		rm -rf "$dir/config"
		mv "$dir/config.tmp" "$dir/config"
	fi
fi
if $bins_only; then
	echo "$dir"
	exit 0
fi

# Wrappers: VT_MYSQL_ROOT/bin/<program> runs the root file system's program through its own
# loader. mysqld's --defaults-file / --no-defaults must stay its first option.
loader="$rootfs/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
[[ -x "$loader" ]] || loader="$rootfs/lib64/ld-linux-x86-64.so.2"
libs="$rootfs/usr/lib/x86_64-linux-gnu:$rootfs/lib/x86_64-linux-gnu:$rootfs/usr/lib/mysql/private"
mkdir -p "$dir/mysql/bin"
for prog in mysqld mysql mysqladmin mysqlbinlog; do
	path="$rootfs/usr/bin/$prog"
	extra=""
	if [[ $prog == mysqld ]]; then
		path="$rootfs/usr/sbin/mysqld"
		extra="--lc-messages-dir=$rootfs/usr/share/mysql --character-sets-dir=$rootfs/usr/share/mysql/charsets --plugin-dir=$rootfs/usr/lib/mysql/plugin"
	else
		extra="--character-sets-dir=$rootfs/usr/share/mysql/charsets"
	fi
	[[ $prog == mysqlbinlog ]] && extra=""
	cat >"$dir/mysql/bin/$prog.tmp" <<WRAP
#!/bin/sh
# Runs $path through its root file system's own loader (written by scripts/vitess.sh).
pre=""
case "\${1:-}" in --no-defaults | --defaults-file=* | --defaults-extra-file=*) pre="\$1"; shift ;; esac
[ "\${1:-}" = "--version" ] && exec "$loader" --library-path "$libs" "$path" --version
exec "$loader" --library-path "$libs" "$path" \$pre $extra "\$@"
WRAP
	chmod 755 "$dir/mysql/bin/$prog.tmp"
	mv "$dir/mysql/bin/$prog.tmp" "$dir/mysql/bin/$prog"
done
# vtcombo (the tablets and vtgate) runs with the query consolidator on, as vttablet does by default and
# as hosted Vitess runs it: a read outside a transaction that is identical to one already in flight gets
# that one's result, which may predate a write committed before the second read began. mend's reads
# carry a per-statement CONSOLIDATOR=disabled directive (storage/vitess.go), so its record store stays
# linearizable (itest's TestLinearizableRecordStore) without a tablet flag; TestConsolidatorNeedsTheDirective
# shows that reads without it are caught here. bin/vtcombo is this wrapper (it states the flag, so a
# changed default in a later Vitess shows up); the binary is bin/vtcombo.bin.
if [[ -f "$dir/bin/vtcombo" ]] && [[ "$(head -c2 "$dir/bin/vtcombo")" != "#!" ]]; then
	mv "$dir/bin/vtcombo" "$dir/bin/vtcombo.bin"
fi
cat >"$dir/bin/vtcombo.tmp" <<'WRAP'
#!/bin/sh
# Written by scripts/vitess.sh: the tablets' query consolidator on, as in production (docs/operations.md).
exec "$(dirname "$0")/vtcombo.bin" --enable-consolidator=true "$@"
WRAP
chmod 755 "$dir/bin/vtcombo.tmp"
mv "$dir/bin/vtcombo.tmp" "$dir/bin/vtcombo"
chmod -R a+rX "$dir"
echo "$dir"
