#!/usr/bin/env bash
# Install what the tests need and run them. Idempotent; fast on the second run.
#   scripts/test.sh [pytest args]                          every tier (what CI runs)
#   scripts/test.sh unit|cluster|spark|ui [pytest args]    one tier (tests/<tier>), installing only what it needs
#   scripts/test.sh pure [pytest args]                     the runtime's unit tests on its plain-Python modules
#   scripts/test.sh lint [tool [args]]                     ruff, mypy and the import contracts alone (scripts/lint.py;
#                                                          the unit tier runs them too)
# Other arguments go to pytest; a path under tests/ among them (a folder, a file, file::test) narrows the tier.
#   scripts/test.sh debian [pytest args]                   the unit tier and one cluster test on Debian's own
#                                                          Python (/usr/bin/python3, 3.11.2), in .venv-debian
# Python packages go into .venv; Debian's ZooKeeper, Redis, Chromium, Prometheus, kcat and Docker (docker.io,
# docker-compose, mmdebstrap: the compose test) come from apt (Java is already on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

tier=""
case "${1:-}" in
  unit|cluster|spark|ui|lint|pure|debian) tier="$1"; shift ;;
esac

# What each tier needs: the venv's extras and Debian packages (the whole suite needs all of them).
case "$tier" in
  unit|lint|pure) extras="test"; debs="" ;;
  cluster) extras="test,kafka"; debs="zookeeper redis-server kcat docker" ;;
  spark)   extras="test,spark,kafka"; debs="zookeeper" ;;  # one test compares Spark with a squall cluster
  ui)      extras="test";       debs="zookeeper chromium prometheus" ;;
  debian)  extras="test";       debs="zookeeper debian-python" ;;
  *)       extras="test,spark,kafka"; debs="zookeeper chromium prometheus redis-server kcat docker debian-python" ;;
esac
[ "$tier" = debian ] || ensure_venv "$extras"  # the debian run has an environment of its own
# Bytecode is kept even where the environment sets PYTHONDONTWRITEBYTECODE (CI and editor
# set-ups often do): every process the suite starts (daemons, workers, each CLI call; well over
# a thousand) would compile squall's sources again, some 40% of a daemon's start-up CPU. It goes
# to .venv/pycache, not beside the sources; what that mirrors of the tests' temporary
# directories goes at each run, so that it stays the size of one run.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  export PYTHONPYCACHEPREFIX="$VENV/pycache"
  unset PYTHONDONTWRITEBYTECODE
  rm -rf "$PYTHONPYCACHEPREFIX${TMPDIR:-/tmp}"
fi
if [ "$tier" = "lint" ]; then
  exec "$VENV/bin/python" scripts/lint.py "$@"
fi

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
# apt_quietly PACKAGE [APT-OPTION...]: install a Debian package, updating the lists only when needed.
apt_quietly() {
  $SUDO apt-get install -y -qq "$@" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$@" >/dev/null
  }
}
for deb in $debs; do
  case "$deb" in
    zookeeper) [ -f /usr/share/java/zookeeper.jar ] || apt_quietly zookeeper ;;
    redis-server) command -v redis-server >/dev/null || apt_quietly redis-server ;;  # state tests (squall.state)
    # the compose test: Debian's Docker engine and docker-compose, mmdebstrap for its base image
    docker) { command -v dockerd && command -v docker-compose && command -v mmdebstrap; } >/dev/null \
              || apt_quietly docker.io docker-compose mmdebstrap ;;
    # Debian's own Python and its venv module (the `debian` run)
    debian-python) [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null \
                     || apt_quietly python3 python3-venv ;;
    *) command -v "$deb" >/dev/null || apt_quietly "$deb" ;;  # the web UI tests, the metrics scrape
  esac
done

# Node.js multilang tests (cluster tier): node-storm, a published Storm multilang adapter, from
# npm into tests/support/node (once; no lock file is written).
if [ "$tier" = "" ] || [ "$tier" = "cluster" ]; then
  if command -v npm >/dev/null && [ ! -d tests/support/node/node_modules/node-storm ]; then
    (cd tests/support/node && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null 2>&1) \
      || echo "npm install in tests/support/node failed: the Node.js multilang tests will fail" >&2
  fi
fi

# The topology-environment test installs streamparse's redis example's pin, redis==2.10.1, on a
# cluster with no index, as an offline cluster does: it is published as an sdist only, so its
# wheel is built here once, into tests/support/wheelhouse.
if [ "$tier" = "" ] || [ "$tier" = "cluster" ]; then
  if ! compgen -G "tests/support/wheelhouse/redis-2.10.1-*.whl" >/dev/null; then
    "$VENV/bin/pip" wheel --quiet --no-deps --disable-pip-version-check "redis==2.10.1" \
        -w tests/support/wheelhouse >/dev/null 2>&1 \
      || echo "building redis 2.10.1's wheel failed: the topology-environment test will fail" >&2
  fi
fi

# The runtime's tests once more on the plain-Python modules (SQUALL_PURE=1: squall/compiled.py),
# after the whole suite (or alone: `pure`): both builds must behave alike.
run_pure() {
  echo "the runtime's tests again on its plain-Python modules (SQUALL_PURE=1)"
  SQUALL_PURE=1 "$VENV/bin/pytest" -q -n 2 "$@" tests/unit/runtime tests/unit/messaging tests/unit/test_grouping.py \
    tests/unit/test_compiled.py tests/unit/test_local.py
}

# The unit tier and one cluster test (bundles unpacked by a supervisor, workers started) once
# more on Debian's own Python, the distribution's interpreter users install the wheel on, in a
# venv of its own. The lint checks are left out: they read the sources, not the interpreter.
DEBIAN_VENV="$PWD/.venv-debian"
install_debian() {
  ( VENV="$DEBIAN_VENV" PYTHON=/usr/bin/python3 STAMP="$DEBIAN_VENV/.squall-installed" \
      INSTALL_LOG="$DEBIAN_VENV/install.log"
    SQUALL_PURE=1 ensure_venv test )  # no second compile: the main install built the tree's modules
}
run_debian() {
  echo "the unit tier and a cluster test again on Debian's Python ($(/usr/bin/python3 --version))"
  # The cluster test first: it mostly waits (on a worker's relaunch), which the other process
  # spends on the unit tier; handed out last, it ran alone at the end.
  "$DEBIAN_VENV/bin/pytest" -q -n 2 "$@" \
    "tests/cluster/test_cluster_e2e.py::test_kill_9_worker_is_relaunched_and_every_message_completes" \
    tests/unit --deselect tests/unit/test_lint.py --deselect tests/unit/test_layers.py
}

if [ "$tier" = pure ]; then
  run_pure "$@"
  exit 0
fi
if [ "$tier" = debian ]; then
  install_debian
  run_debian "$@"
  exit 0
fi
if [ -n "$tier" ]; then
  for arg in "$@"; do
    if [[ "$arg" == tests/* && -e "${arg%%::*}" ]]; then
      exec "$VENV/bin/pytest" "$@"  # the arguments already name what to run
    fi
  done
  # A whole tier on two processes (the unit tier: ~70 s on one, ~45 s on two).
  exec "$VENV/bin/pytest" -n 2 --dist loadfile "tests/$tier" "$@"
fi
# The plain-Python rerun and the Debian run wait for the suite's tail: once what is left to
# hand out is the suite's last minute or so (tests/support/scheduling.py makes $tail: the
# short cluster files and the unit tier's), they share it; they wait on deadlines more than
# they compute, as those files do, and ran after the suite (60-70 s of wall time). Debian's
# venv is installed meanwhile (pip mostly unpacks and waits on the disk; a clean checkout's
# takes half a minute). Their output is shown after the suite's.
reruns_dir="$(mktemp -d)"
tail="$reruns_dir/tail"
reruns() {
  local rc=0
  install_debian >"$reruns_dir/install.log" 2>&1 || { cat "$reruns_dir/install.log"; return 1; }
  while [ ! -e "$tail" ]; do sleep 1; done
  run_pure || rc=1
  cat "$reruns_dir/install.log"
  run_debian || rc=1
  return "$rc"
}
reruns >"$reruns_dir/out" 2>&1 &
reruns_pid=$!
trap 'kill "$reruns_pid" 2>/dev/null; rm -rf "$reruns_dir"' EXIT  # interrupted: the reruns go too
# Three test processes (pytest-xdist), each taking whole files, the longest first
# (tests/support/scheduling.py): most tests wait on servers, daemons and deadlines rather than
# compute (with two, a whole run used 1,573 CPU-s in 1,575 s: one core of two), so a third
# one on two cores shortens the run.
suite=0
SQUALL_TEST_TAIL="$tail" "$VENV/bin/pytest" -n 3 --dist loadfile "$@" || suite=$?
touch "$tail"  # a run that stopped early (-x, a collection error) may not have reached it
reruns=0
wait "$reruns_pid" || reruns=$?
trap 'rm -rf "$reruns_dir"' EXIT
cat "$reruns_dir/out"
[ "$suite" = 0 ] || exit "$suite"
exit "$reruns"
