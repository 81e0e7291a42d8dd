#!/usr/bin/env bash
# image.sh builds mend's container image with no registry (make image): a static binary
# (CGO_ENABLED=0, the version baked in with -ldflags) and deploy/image/Dockerfile, FROM scratch,
# with this machine's CA bundle and a passwd file naming the non-root user 65532.
#
#   scripts/image.sh                 tags mend:<version> and mend:latest
#   IMAGE=mend:test scripts/image.sh tags only IMAGE
#   VERSION=v1.2.3 scripts/image.sh  overrides the version (default: git describe)
#
# Prints the tag and the image's size on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}"
# The revision too: the image's build has no VCS stamp when -buildvcs is off (GOFLAGS=-buildvcs=false).
revision="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
tags=("${IMAGE:-mend:$version}")
[[ -n "${IMAGE:-}" ]] || tags+=(mend:latest)
ca=/etc/ssl/certs/ca-certificates.crt
[[ -r "$ca" ]] || { echo "image.sh: $ca is missing (apt-get install ca-certificates)" >&2; exit 1; }

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=readonly}" go build -trimpath \
	-ldflags "-s -w -X main.version=$version -X main.revision=$revision" -o "$ctx/mend" ./cmd/mend
cp "$ca" "$ctx/ca-certificates.crt"
cp deploy/image/Dockerfile "$ctx/"
printf 'root:x:0:0:root:/:/sbin/nologin\nmend:x:65532:65532:mend:/:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\nmend:x:65532:\n' >"$ctx/group"

args=()
for t in "${tags[@]}"; do args+=(-t "$t"); done
# The legacy builder: FROM scratch needs nothing BuildKit adds, and buildx is not installed everywhere.
# Its deprecation notice is shown only when the build fails.
if ! DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build -q --build-arg VERSION="$version" "${args[@]}" "$ctx" >/dev/null 2>"$ctx/build.err"; then
	cat "$ctx/build.err" >&2
	exit 1
fi
size="$(docker image inspect -f '{{.Size}}' "${tags[0]}")"
echo "image.sh: built ${tags[*]} (version $version): $((size / 1024)) KiB"
