#!/usr/bin/env bash
# Create the environment (once) and run the main job: word count in local mode.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv
"$VENV/bin/python" examples/wordcount.py --duration "${DURATION:-10}"
here="${VENV#"$PWD"/}"  # .venv when it is the repository's own
echo "squall is installed in $here: 'source $here/bin/activate' puts squall and python on PATH" \
     "(or run $here/bin/squall); README.md goes on from here"
