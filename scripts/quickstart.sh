#!/usr/bin/env bash
# Create the environment (once) and run the main job: word count in local mode.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ensure_venv
"$VENV/bin/python" examples/wordcount.py --duration "${DURATION:-10}"
