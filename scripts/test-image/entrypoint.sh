#!/bin/sh
# Entrypoint of mend's locally built test images (MEND_ENGINE=mariadb or mysql). It initialises
# the data directory on first start (an empty volume or tmpfs), lets root in over TCP without a
# password (the container publishes on 127.0.0.1 only), and then becomes the server, so `docker
# kill` delivers SIGKILL to the server itself and `docker pause` freezes it. Extra arguments are
# server options (the harness passes the same ones a private local server runs with).
set -eu
datadir=/var/lib/mend-mysql
mkdir -p "$datadir" /run/mysqld
cat >/run/mysqld/init.sql <<'SQL'
CREATE USER IF NOT EXISTS 'root'@'%';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
case "${MEND_ENGINE:-mariadb}" in
mysql)
	# The image carries a data directory initialised at build time: copying it is much faster
	# than mysqld --initialize-insecure.
	if [ ! -d "$datadir/mysql" ]; then
		cp -a /opt/mend/mysql-template/. "$datadir"/
	fi
	exec mysqld --no-defaults --user=root --datadir="$datadir" --socket=/run/mysqld/mysqld.sock \
		--port=3306 --bind-address=0.0.0.0 --mysqlx=OFF --log-error-verbosity=1 \
		--init-file=/run/mysqld/init.sql "$@"
	;;
*)
	if [ ! -d "$datadir/mysql" ]; then
		mariadb-install-db --no-defaults --user=root --datadir="$datadir" \
			--auth-root-authentication-method=normal --skip-test-db --skip-name-resolve >/tmp/install-db.log 2>&1 ||
			{ cat /tmp/install-db.log >&2; exit 1; }
	fi
	exec mariadbd --no-defaults --user=root --datadir="$datadir" --socket=/run/mysqld/mysqld.sock \
		--port=3306 --bind-address=0.0.0.0 --init-file=/run/mysqld/init.sql "$@"
	;;
esac
