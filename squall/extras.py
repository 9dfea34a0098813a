"""squall's optional extras and the one way to install them, said the same in every error."""
from __future__ import annotations

INSTALL_DOC = "docs/install.md"


def needs(what: str, package: str, extra: str) -> str:
    """The sentence for ``what`` missing ``package``: which extra brings it and the commands
    that install it (the same as docs/install.md and scripts/quickstart.sh say)."""
    return (f"{what} needs {package}, from squall's {extra} extra: in a checkout `scripts/quickstart.sh {extra}`, "
            f"with a wheel `pip install 'squall-...whl[{extra}]'` ({INSTALL_DOC})")
