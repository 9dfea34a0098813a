# Shared by quickstart.sh and test.sh: one virtual environment, installed idempotently.
VENV="${SQUALL_VENV:-$PWD/.venv}"
STAMP="$VENV/.squall-installed"

# ensure_venv [EXTRAS]: create .venv and install squall (with EXTRAS) unless pyproject.toml
# and the extras are unchanged since the last install.
ensure_venv() {
  local extras="${1:-}"
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${extras}"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    "$VENV/bin/python" -m pip install --quiet -e "$target"
    echo "$want" > "$STAMP"
  fi
}
