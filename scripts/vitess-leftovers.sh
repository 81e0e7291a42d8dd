#!/usr/bin/env bash
# vitess-leftovers.sh fails (and says what) when a Vitess test run left something behind: a
# vttestserver, vtcombo or mysqlctl process, a vtctld, vtgate or vttablet of the multi-process
# cluster (internal/vitesscluster), an etcd or mysqld of either, or a temporary directory of the
# Vitess backend (mend-testserver-vitess-*) or the cluster (mend-vitess-cluster-*). It removes
# nothing itself.
set -uo pipefail
status=0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mend/vitess-"
procs=$(ps -eo pid=,args= | grep -E "(/bin/(vttestserver|vtcombo|vtcombo\.bin|mysqlctl|vtctld|vtgate|vttablet) |${cache}[^ ]*/mysql/bin/mysqld|--defaults-file=${TMPDIR:-/tmp}/mend-(testserver-vitess|vitess-cluster)-|--data-dir=${TMPDIR:-/tmp}/mend-vitess-cluster-)" | grep -v grep || true)
if [[ -n "$procs" ]]; then
	echo "vitess-leftovers: processes left running:"; echo "$procs"; status=1
fi
dirs=$(find "${TMPDIR:-/tmp}" -maxdepth 1 \( -name 'mend-testserver-vitess-*' -o -name 'mend-vitess-cluster-*' \) 2>/dev/null || true)
if [[ -n "$dirs" ]]; then
	echo "vitess-leftovers: directories left behind:"; echo "$dirs"; status=1
fi
exit $status
