#!/usr/bin/env bash
# Install everything the tests need (Python packages, Debian's ZooKeeper, Redis, Chromium and
# Prometheus; Java is already on the machine) and run the whole suite. Idempotent; fast on the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "test,spark"
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
# Node.js multilang tests: node-storm, a published Storm multilang adapter, from npm into
# tests/support/node (once; no lock file is written).
if command -v npm >/dev/null && [ ! -d tests/support/node/node_modules/node-storm ]; then
  (cd tests/support/node && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null 2>&1) \
    || echo "npm install in tests/support/node failed: the Node.js multilang tests will fail" >&2
fi
exec "$VENV/bin/pytest" "$@"
