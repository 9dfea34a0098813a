#!/usr/bin/env bash
# Install everything the tests need (Python packages, Debian's ZooKeeper; Java is already
# on the machine) and run the whole suite. Idempotent; fast on the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "test,spark"
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq zookeeper >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq zookeeper >/dev/null
  }
fi
exec "$VENV/bin/pytest" "$@"
