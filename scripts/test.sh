#!/usr/bin/env bash
# Install everything the tests need (Python packages, Debian's ZooKeeper and Redis; Java is already
# on the machine) and run the whole suite. Idempotent; fast on the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "test,spark"
# Debian packages of the real servers tests start: ZooKeeper, and Redis for state.
install_deb() {  # install_deb PACKAGE FILE-IT-PROVIDES
  if [ ! -e "$2" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq "$1" >/dev/null 2>&1 || {
      $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$1" >/dev/null
    }
  fi
}
install_deb zookeeper /usr/share/java/zookeeper.jar
install_deb redis-server /usr/bin/redis-server
exec "$VENV/bin/pytest" "$@"
