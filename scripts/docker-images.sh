#!/usr/bin/env bash
# The images docker-compose.yml and the Dockerfile start from, made from Debian's packages on a
# host that cannot pull them (no image registry reachable); a host that can pulls them as usual
# and this script changes nothing there.
#   debian:bookworm-slim     the Dockerfile's BASE_IMAGE: mmdebstrap, from this host's apt sources
#   zookeeper:3.8            Debian's zookeeper package (docker/zookeeper/)
#   prom/prometheus:v2.42.0  Debian's prometheus package (docker/prometheus/)
# The Kafka broker of docker-compose.yml's "kafka" profile has no Debian package: pull it, or
# leave the profile off.
# Idempotent: an image already present is kept. Needs docker (DOCKER_HOST is honoured) and, to
# make the base image, root and mmdebstrap (apt-get install mmdebstrap).
#   scripts/docker-images.sh            make what is missing
#   scripts/docker-images.sh --local    never try a registry first
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=debian:bookworm-slim
try_pull=1
[ "${1:-}" = "--local" ] && try_pull=0
PULL_TIMEOUT="${SQUALL_PULL_TIMEOUT:-20}"

have() { docker image inspect "$1" >/dev/null 2>&1; }

# quietly COMMAND...: its output only when it fails.
quietly() {
  local log
  log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "failed: $*" >&2
    return 1
  fi
  rm -f "$log"
}

# pull IMAGE: try a registry once; after the first failure, never again in this run.
pull() {
  [ "$try_pull" = 1 ] || return 1
  if timeout "$PULL_TIMEOUT" docker pull -q "$1" >/dev/null 2>&1; then
    return 0
  fi
  echo "no image registry answered for $1: making the images from Debian's packages"
  try_pull=0
  return 1
}

# The apt sources the base image gets: this host's own (a Debian 12 host), else Debian's mirror.
sources() {
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -s "$f" ] && grep -q bookworm "$f"; then echo "$f"; return; fi
  done
  echo "deb http://deb.debian.org/debian bookworm main"
}

if ! have "$BASE" && ! pull "$BASE"; then
  command -v mmdebstrap >/dev/null || { echo "mmdebstrap is missing: apt-get install mmdebstrap" >&2; exit 1; }
  echo "making $BASE with mmdebstrap"
  # Like Debian's slim images: no manual pages, documentation or translations (the copyright
  # files stay), also for whatever images built on it install.
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm - "$(sources)" | docker import -c 'CMD ["bash"]' - "$BASE" >/dev/null
fi

for spec in zookeeper:3.8=docker/zookeeper prom/prometheus:v2.42.0=docker/prometheus; do
  image="${spec%%=*}" dir="${spec#*=}"
  if ! have "$image" && ! pull "$image"; then
    echo "making $image from Debian's package ($dir)"
    quietly docker build -q --force-rm --build-arg BASE_IMAGE="$BASE" -t "$image" "$dir"
  fi
done
