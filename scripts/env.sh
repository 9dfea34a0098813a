# Shared by quickstart.sh and test.sh: one virtual environment, installed idempotently.
VENV="${SQUALL_VENV:-$PWD/.venv}"
STAMP="$VENV/.squall-installed"
INSTALL_LOG="$VENV/install.log"

# pip_quietly ARGS...: run pip with its output in $INSTALL_LOG (this machine's pip config
# warns about every package); show the log only when pip fails.
pip_quietly() {
  if ! "$VENV/bin/python" -m pip "$@" >>"$INSTALL_LOG" 2>&1; then
    cat "$INSTALL_LOG" >&2
    echo "pip $* failed; the log above is in $INSTALL_LOG" >&2
    return 1
  fi
}

# ensure_venv [EXTRAS]: create .venv and install squall (with EXTRAS) unless pyproject.toml
# and the extras are unchanged since the last install. The editable install builds nothing
# in the working tree; its squall.egg-info is ignored by git.
ensure_venv() {
  local extras="${1:-}"
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${extras}"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "installing squall${extras:+ [$extras]} into $VENV (log: $INSTALL_LOG)"
    : > "$INSTALL_LOG"
    pip_quietly install --upgrade pip
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    pip_quietly install -e "$target"
    echo "$want" > "$STAMP"
  fi
}
