#!/usr/bin/env bash
# docker-leftovers.sh runs after the tests: it removes every container and volume labelled
# mend.testserver whose owning process (label mend.testserver.owner-pid) is gone, and fails if
# it found any, since the harness should have removed them itself. Servers of test processes
# still running (another run on the same engine) are left alone. No Docker engine: nothing to do.
set -euo pipefail
command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1 || exit 0

found=0
dead() { [[ -z "$1" ]] || ! kill -0 "$1" 2>/dev/null; }
while read -r id pid; do
	[[ -n "$id" ]] || continue
	if dead "$pid"; then
		echo "mend: leftover test container $id (owner pid $pid gone); removing it" >&2
		docker rm -f -v "$id" >/dev/null || true
		found=1
	fi
done < <(docker ps -a --filter label=mend.testserver --format '{{.ID}} {{.Label "mend.testserver.owner-pid"}}')
while read -r name; do
	[[ -n "$name" ]] || continue
	pid=$(docker volume inspect -f '{{index .Labels "mend.testserver.owner-pid"}}' "$name" 2>/dev/null || true)
	if dead "$pid"; then
		echo "mend: leftover test volume $name (owner pid $pid gone); removing it" >&2
		docker volume rm -f "$name" >/dev/null || true
		found=1
	fi
done < <(docker volume ls -q --filter label=mend.testserver)
# A test image that lost its tag (two builds racing for one tag, or a --force rebuild that could
# not remove the old one) is dead weight of several hundred MB.
while read -r id; do
	[[ -n "$id" ]] || continue
	echo "mend: dangling test image $id (a build lost its tag); removing it" >&2
	docker rmi "$id" >/dev/null 2>&1 || true
	found=1
done < <(docker images -q --filter dangling=true --filter label=mend.test-image)
if [[ $found -eq 1 ]]; then
	echo "mend: the test harness or an image build left containers, volumes or images behind (removed now); that is a bug" >&2
	exit 1
fi
echo "mend: no test containers, volumes or dangling test images left behind"
