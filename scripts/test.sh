#!/usr/bin/env bash
# Install everything the tests need (Python packages, Debian's ZooKeeper, Redis, Chromium,
# Prometheus and kcat; Java is already on the machine) and run the whole suite. Idempotent; fast on the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "test,spark,kafka"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
# apt_quietly PACKAGE: install a Debian package, updating the lists only when needed.
apt_quietly() {
  $SUDO apt-get install -y -qq "$1" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$1" >/dev/null
  }
}
[ -f /usr/share/java/zookeeper.jar ] || apt_quietly zookeeper
command -v chromium >/dev/null || apt_quietly chromium  # the web UI tests
command -v prometheus >/dev/null || apt_quietly prometheus  # the metrics test scrapes with it
command -v redis-server >/dev/null || apt_quietly redis-server  # state tests (squall.state)
command -v kcat >/dev/null || apt_quietly kcat  # a second Kafka client: the interoperability check
exec "$VENV/bin/pytest" "$@"
