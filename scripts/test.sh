#!/usr/bin/env bash
# Install everything the tests need (Python packages, Debian's ZooKeeper and Prometheus; Java is already
# on the machine) and run the whole suite. Idempotent; fast on the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "test,spark"
# apt_install PACKAGE: Debian's package, quietly (apt-get update only if the first try fails).
apt_install() {
  local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq "$1" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$1" >/dev/null
  }
}
[ -f /usr/share/java/zookeeper.jar ] || apt_install zookeeper
command -v prometheus >/dev/null || apt_install prometheus   # the metrics test scrapes with it
exec "$VENV/bin/pytest" "$@"
