#!/usr/bin/env bash
# Create the environment (once) and run the main job: word count in local mode.
#   scripts/quickstart.sh                 squall in .venv, installed from this checkout (editable)
#   scripts/quickstart.sh kafka,spark     the same with optional extras (kafka, spark, redis, profile), kept
#                                         across later runs; docs/install.md says what each brings
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv "${1:-}"
"$VENV/bin/python" examples/wordcount.py --duration "${DURATION:-10}"
here="${VENV#"$PWD"/}"  # .venv when it is the repository's own
echo "squall is installed in $here from this checkout: 'source $here/bin/activate' puts squall and python on" \
     "PATH (or run $here/bin/squall); extras: scripts/quickstart.sh kafka|spark|redis|profile; a wheel for other" \
     "machines: $here/bin/python -m build (docs/install.md). README.md goes on from here"
