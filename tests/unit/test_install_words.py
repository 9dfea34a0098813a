"""One way to install, said the same everywhere: every page, script and error message that
tells a reader to install squall (or one of its extras) names the commands docs/install.md
gives, and that page covers every extra pyproject.toml defines."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from squall.extras import needs

REPO = Path(__file__).resolve().parents[2]
# The one pip command docs/install.md gives: a wheel `python -m build` made (with or without an
# extra; `squall-...whl` in error messages); in a checkout, scripts/quickstart.sh instead.
ALLOWED = re.compile(r"pip install (-[-\w]+ )*'?[\w/]*squall-[\w.*-]+whl(\[[\w{}]+\])?'?")
EXTRAS_NOT_FOR_USERS = {"test"}


def _texts() -> dict[str, str]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "scripts").glob("*.sh")),
             REPO / "Dockerfile", REPO / "docker-compose.yml", REPO / "conf" / "squall.yaml.example"]
    for folder in ("squall", "daemons", "messaging"):
        files += sorted((REPO / folder).rglob("*.py"))
    return {str(f.relative_to(REPO)): f.read_text(encoding="utf-8") for f in files}


def test_every_pip_install_of_squall_is_one_the_install_page_gives() -> None:
    wrong = []
    for name, text in _texts().items():
        for match in re.finditer(r"pip install[^\n`\"]*", text):
            said = match.group(0).split(" #")[0].rstrip(" .,;)\\")  # no shell comment, no line continuation
            if "squall" not in said and "." not in said.split("pip install", 1)[1][:4]:
                continue  # another package (the Dockerfile's build requirements, say)
            if not ALLOWED.fullmatch(said):
                wrong.append(f"{name}: {said}")
    assert wrong == [], "install commands other than docs/install.md's:\n" + "\n".join(wrong)


def test_the_install_page_and_the_error_sentence_name_every_extra() -> None:
    page = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    quickstart = (REPO / "scripts" / "quickstart.sh").read_text(encoding="utf-8")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra in sorted(set(extras) - EXTRAS_NOT_FOR_USERS):
        assert f"| `{extra}` |" in page, extra
        assert extra in quickstart, extra
        sentence = needs("something", "a package", extra)
        assert f"scripts/quickstart.sh {extra}" in sentence and f"whl[{extra}]" in sentence
