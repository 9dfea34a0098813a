"""The docs test's runner: every fenced block of a page marked ``sh run`` or ``python run``,
in order, as a reader would run them.

A block's info string is its language, then words (``key=value``, values may be quoted):

- ``sh run`` / ``python run``: run it; it must exit 0 (``exit=N``: N);
- ``expect="TEXT"``: its output (stdout and stderr) must contain TEXT;
- ``timeout=S``: its deadline (default 180 s);
- ``retry=S``: run it again (a second apart) until it passes or S seconds have gone by, as a
  reader waits a moment for workers to start and tries again;
- ``background wait="TEXT"`` (``sh`` only): a command a reader leaves running in a terminal
  of its own (``squall dev-cluster``): started in a session of its own, the page goes on once
  its output shows TEXT; at the end of the page it gets SIGINT, as from Ctrl-C, and must end
  within ``stop=S`` seconds (default 10) on its own;
- ``file=NAME``: its text is written to NAME (a topology file the reader saves); with ``run``
  too, that file is then run (``python NAME``);
- ``spark``: the page needs PySpark and Java (it runs in the Spark tier).

``sh`` blocks of a page share one shell's state, as in one terminal: the variables a block
exports and the directory it ends in carry over to the next (``source .venv/bin/activate``
too). ``python`` blocks run on their own with the environment's ``python``. Everything runs
in a copy of the repository (its files as git sees them, with ``.venv`` linked to the test's
environment), with ``DURATION=3`` for ``scripts/quickstart.sh``.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(```+|~~~+)\s*(\S*)\s*(.*)$")
LANGS = {"sh", "python"}
KEYS = {"run", "expect", "timeout", "exit", "background", "wait", "stop", "file", "spark", "retry"}
DEFAULT_TIMEOUT = 180.0
STOP_SECS = 10.0


class DocsError(AssertionError):
    """A block failed, or a page is malformed; the message names page, line and output."""


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    attrs: dict[str, str]
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return "run" in self.attrs

    @property
    def timeout(self) -> float:
        return float(self.attrs.get("timeout", DEFAULT_TIMEOUT))


def parse_info(info: str) -> dict[str, str]:
    """``run expect="a b" timeout=5`` -> {"run": "", "expect": "a b", "timeout": "5"}."""
    out = {}
    for word in shlex.split(info):
        key, _, value = word.partition("=")
        out[key] = value
    return out


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` whose info string says ``run`` or ``file=`` (others are
    text for the reader). DocsError for an unknown word or language in such a block."""
    out: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, info = m.groups()
        end = i + 1
        while end < len(lines) and not lines[end].startswith(fence[:3]):
            end += 1
        attrs = parse_info(info) if info else {}
        if "run" in attrs or "file" in attrs:
            where = f"{page.relative_to(REPO)}:{i + 1}"
            unknown = set(attrs) - KEYS
            if unknown:
                raise DocsError(f"{where}: unknown words in the info string: {sorted(unknown)}")
            if lang not in LANGS and "run" in attrs:
                raise DocsError(f"{where}: a runnable block must be sh or python, not {lang!r}")
            if "background" in attrs and (lang != "sh" or "wait" not in attrs):
                raise DocsError(f"{where}: a background block is sh with wait=\"TEXT\"")
            out.append(Block(page, i + 1, lang, attrs, "\n".join(lines[i + 1:end]) + "\n"))
        i = end + 1
    return out


def pages() -> list[Path]:
    """The README and every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def runnable_pages(spark: bool) -> list[Path]:
    """Pages with blocks to run: those that need Spark, or the others."""
    out = []
    for page in pages():
        found = [b for b in blocks(page) if b.runs]
        if found and any("spark" in b.attrs for b in found) == spark:
            out.append(page)
    return out


def copy_repository(dest: Path) -> Path:
    """The repository's files as git sees them (tracked and new, not ignored) under ``dest``,
    with ``.venv`` a link to the environment running the tests: a fresh clone, set up."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = REPO / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


@dataclass
class Background:
    block: Block
    proc: subprocess.Popen
    log: Path
    # What it started, as seen while it ran (psutil refuses to signal a reused PID).
    family: dict[int, psutil.Process] = field(default_factory=dict)
    stop_secs: float | None = None  # how long it took to end after Ctrl-C


class PageRun:
    """Runs one page's blocks in ``workdir``; ``close()`` stops what they left running."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page, self.workdir = page, workdir
        self.cwd = workdir
        bin_dir = Path(sys.prefix) / "bin"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUALL_", "PYTEST_"))}
        self.env.update({"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "DURATION": "3",
                         "HOME": str(workdir / "home"),
                         # The page's processes share their bytecode, kept beside the copy (not in
                         # it) and gone with the test's directory.
                         "PYTHONPYCACHEPREFIX": str(workdir.parent / "pycache")})
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        (workdir / "home").mkdir(exist_ok=True)
        self.background: list[Background] = []
        self.n = 0
        self.transcript: list[str] = []  # what ran, for failure messages

    def run_all(self) -> None:
        for block in blocks(self.page):
            self.run(block)

    def run(self, block: Block) -> None:
        self.n += 1
        if "file" in block.attrs:
            (self.cwd / block.attrs["file"]).write_text(block.code, encoding="utf-8")
            if not block.runs:
                return
        if "background" in block.attrs:
            self._start(block)
            return
        until = time.monotonic() + float(block.attrs.get("retry", 0))
        while True:
            started = time.monotonic()
            out, code = self._shell(block) if block.lang == "sh" else self._python(block)
            self.transcript.append(f"--- {block.where} ({time.monotonic() - started:.1f}s, exit {code})\n{out}")
            self._note_family()
            problem = self._check(block, out, code)
            if problem is None:
                return
            if time.monotonic() > until:
                raise DocsError(f"{block.where}: {problem}\n{block.code}\n--- output:\n{out[-4000:]}")
            time.sleep(1.0)

    @staticmethod
    def _check(block: Block, out: str, code: int) -> str | None:
        want = int(block.attrs.get("exit", 0))
        if code != want:
            return f"exited {code}, not {want}"
        expect = block.attrs.get("expect")
        if expect and expect not in out:
            return f"output lacks {expect!r}"
        return None

    def _shell(self, block: Block) -> tuple[str, int]:
        state = self.workdir / f".block-{self.n}"
        script = (f"set -eo pipefail\ncd {shlex.quote(str(self.cwd))}\n{block.code}\n"
                  f"env -0 > {shlex.quote(str(state))}.env\npwd > {shlex.quote(str(state))}.cwd\n")
        out, code = self._call(["bash", "-c", script], block)
        if code == 0:
            pairs = (state.with_suffix(".env")).read_bytes().split(b"\0")
            self.env = dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
            self.cwd = Path(state.with_suffix(".cwd").read_text().strip())
        return out, code

    def _python(self, block: Block) -> tuple[str, int]:
        if "file" in block.attrs:
            return self._call(["python", block.attrs["file"]], block)
        path = self.workdir / f".block-{self.n}.py"
        path.write_text(block.code, encoding="utf-8")
        return self._call(["python", str(path)], block)

    def _call(self, argv: list[str], block: Block) -> tuple[str, int]:
        proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=block.timeout)
        except subprocess.TimeoutExpired:
            self._kill_tree(proc.pid)
            out, _ = proc.communicate(timeout=30)
            raise DocsError(f"{block.where}: still running after {block.timeout:g}s\n{block.code}\n"
                            f"--- output:\n{out.decode(errors='replace')[-4000:]}") from None
        return out.decode(errors="replace"), proc.returncode

    def _start(self, block: Block) -> None:
        log = self.workdir / f".background-{self.n}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(["bash", "-c", f"exec {block.code.strip()}"], cwd=self.cwd, env=self.env,
                                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        bg = Background(block, proc, log)
        self.background.append(bg)
        deadline = time.monotonic() + block.timeout
        while block.attrs["wait"] not in log.read_text(errors="replace"):
            self._note_family()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DocsError(f"{block.where}: no {block.attrs['wait']!r} in its output "
                                f"({'exited ' + str(proc.returncode) if proc.poll() is not None else 'timed out'})"
                                f"\n--- output:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
        self._note_family()

    def _note_family(self) -> None:
        for bg in self.background:
            try:
                bg.family.update((p.pid, p) for p in psutil.Process(bg.proc.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass

    def close(self) -> list[str]:
        """Ctrl-C every background command; each must end on its own within its stop time,
        without a SIGKILL of its own. Returns the problems (what lingered is killed by PID)."""
        problems = []
        self._note_family()
        for bg in self.background:
            stop = float(bg.block.attrs.get("stop", STOP_SECS))
            asked = time.monotonic()
            if bg.proc.poll() is None:
                try:
                    os.killpg(bg.proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
            try:
                bg.proc.wait(stop)
            except subprocess.TimeoutExpired:
                problems.append(f"{bg.block.where}: still running {stop:g}s after Ctrl-C")
            bg.stop_secs = time.monotonic() - asked
            text = bg.log.read_text(errors="replace")
            if "SIGKILL" in text:
                problems.append(f"{bg.block.where}: something was SIGKILLed on Ctrl-C:\n{text[-2000:]}")
            if bg.proc.poll() is None:  # still ours: not reaped, so its PID is not reused
                self._kill_tree(bg.proc.pid)
                bg.proc.wait(10)
            left = [p for p in bg.family.values() if p.is_running()]
            if left:
                problems.append(f"{bg.block.where}: left running after Ctrl-C: {_describe(left)}")
            _kill(left)
        return problems

    @staticmethod
    def _kill_tree(pid: int) -> None:
        """SIGKILL ``pid`` and what it started, by PID (only processes this run made)."""
        try:
            root = psutil.Process(pid)
            procs = [*root.children(recursive=True), root]
        except psutil.NoSuchProcess:
            return
        _kill(procs)


def _describe(procs: list[psutil.Process]) -> list[str]:
    """PID, state, parent and command of each, for the failure message."""
    out = []
    for p in procs:
        try:
            what = f"{p.pid} {p.status()} ppid={p.ppid()} {p.name()}"
        except psutil.Error as exc:
            what = f"{p.pid} ({type(exc).__name__})"
        try:
            what += f": {' '.join(p.cmdline())[:200]}"
        except psutil.Error:
            pass
        out.append(what)
    return out


def _kill(procs: list[psutil.Process]) -> None:
    """SIGKILL each (psutil refuses a PID that now names another process) and reap them."""
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def run_page(page: Path, workdir: Path) -> PageRun:
    """Run every block of ``page`` in a fresh copy of the repository under ``workdir``."""
    clone = copy_repository(workdir / "squall")
    run = PageRun(page, clone)
    try:
        run.run_all()
    finally:
        problems = run.close()
    if problems:
        raise DocsError("\n".join(problems))
    return run
