"""A hostile topology: its spout tries to read what the daemons and other topologies keep on
this host and reports everything it found as one error, then swaps its own worker log for a
link, hoping its supervisor serves the linked file through ``squall logs``.

Configuration: ``test.snoop.paths`` (files to read), ``test.snoop.dirs`` (directories to
list), ``test.snoop.link_target`` (where the link points)."""
import errno
import os

from tenant import Counting, one_spout


def attempt(what, path, fn):
    try:
        return f"{what} {path}: {fn()!r}"
    except OSError as exc:
        return f"DENIED {path}: {errno.errorcode.get(exc.errno, exc.errno)}"


def head(path):
    with open(path, "rb") as fh:
        return fh.read(48)


def link(target):
    os.symlink(target, "worker.log.link")  # the cwd is the worker's own directory
    os.replace("worker.log.link", "worker.log")
    return "worker.log"


class Snoop(Counting):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        found = [attempt("READ", path, lambda p=path: head(p)) for path in conf.get("test.snoop.paths", [])]
        found += [attempt("LISTED", path, lambda p=path: sorted(os.listdir(p))[:5])
                  for path in conf.get("test.snoop.dirs", [])]
        target = conf.get("test.snoop.link_target")
        if target:
            found.append(attempt("LINKED", target, lambda: link(target)))
        collector.report_error("snoop:\n" + "\n".join(found))


def topology():
    return one_spout("snoop", Snoop())
