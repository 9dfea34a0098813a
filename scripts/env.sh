# Shared by quickstart.sh and test.sh: one virtual environment, installed idempotently.
# SQUALL_PYTHON: the interpreter it is made with (test.sh makes a second one on Debian's own).
VENV="${SQUALL_VENV:-$PWD/.venv}"
PYTHON="${SQUALL_PYTHON:-python3}"
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

# compiled_sources: the .py files setup.py compiles (squall/compiled.py's MODULES) and every
# .pxd file (a module's own declarations, and shared ones such as wire_ints.pxd that several cimport).
compiled_sources() {
  sed -n 's/^ *"squall[a-z_.]*": "\([a-z_/]*\.py\)",$/\1/p' squall/compiled.py
  find -L squall -name '*.pxd' -not -path '*/__pycache__/*' | LC_ALL=C sort
}

# editable_here: whether the venv's squall is still an editable install (a `pip install .`
# into it replaces that with a copy inside the venv, which edits here no longer reach).
editable_here() {
  local where
  where="$(cd / && "$VENV/bin/python" -c 'import squall; print(squall.__file__)' 2>/dev/null)" || return 1
  case "$where" in
    "$(cd "$VENV" && pwd -P)"/*) return 1 ;;
  esac
}

# ensure_venv [EXTRAS]: create .venv and install squall with EXTRAS (comma-separated) unless
# pyproject.toml is unchanged since the last install and that install covered EXTRAS. Extras
# installed before are kept, so quickstart.sh and test.sh do not undo each other's install.
# The editable install leaves no build files in the working tree, only the compiled modules
# beside their sources (*.so) and squall.egg-info, both ignored by git.
ensure_venv() {
  local extras="${1:-}"
  local hash have_hash="" have_extras="" union
  # What the install is built from: the project file, and setup.py with the modules it
  # compiles (squall/compiled.py lists them), so editing one of those rebuilds.
  hash="$(cat pyproject.toml setup.py squall/compiled.py $(compiled_sources) | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  [ -f "$STAMP" ] && read -r have_hash have_extras < "$STAMP"
  union="$(printf '%s\n' ${have_extras//,/ } ${extras//,/ } | sort -u | paste -sd, -)"
  if [ "$have_hash" = "$hash" ] && editable_here; then
    [ "$union" = "$have_extras" ] && return 0
    # Only extras are new (quickstart.sh, then test.sh): their requirements alone, without
    # building squall again (its compiled modules take a minute of CPU).
    echo "installing squall's extras [$union] into $VENV (log: $INSTALL_LOG)"
    : > "$INSTALL_LOG"
    "$VENV/bin/python" -c 'import sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
print(*(req for name in sys.argv[1].split(",") for req in extras[name]), sep="\n")' "$union" > "$VENV/extras.txt"
    pip_quietly install -r "$VENV/extras.txt"
    echo "$hash $union" > "$STAMP"
    return 0
  fi
  echo "installing squall${union:+ [$union]} into $VENV (log: $INSTALL_LOG)"
  : > "$INSTALL_LOG"
  pip_quietly install --upgrade pip
  local target="."
  [ -n "$union" ] && target=".[$union]"
  pip_quietly install -e "$target"
  echo "$hash $union" > "$STAMP"
}
