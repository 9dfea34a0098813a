"""A hostile topology: its spout tries to read what the daemons and other topologies keep on
this host and reports everything it found as one error, then swaps its own worker log for a
link, hoping its supervisor serves the linked file through ``squall logs``.

Configuration: ``test.snoop.paths`` (files to read), ``test.snoop.dirs`` (directories to
list), ``test.snoop.link_target`` (where the link points)."""
import errno
import os

from squall import Spout, TopologyBuilder
from squall.testing.components import NullBolt


def attempt(what, path, fn):
    try:
        return f"{what} {path}: {fn()!r}"
    except OSError as exc:
        return f"DENIED {path}: {errno.errorcode.get(exc.errno, exc.errno)}"


def head(path):
    with open(path, "rb") as fh:
        return fh.read(48)


class Snoop(Spout):
    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0
        found = [attempt("READ", path, lambda p=path: head(p)) for path in conf.get("test.snoop.paths", [])]
        found += [attempt("LISTED", path, lambda p=path: sorted(os.listdir(p))[:5])
                  for path in conf.get("test.snoop.dirs", [])]
        target = conf.get("test.snoop.link_target")
        if target:
            def link():
                os.symlink(target, "worker.log.link")
                os.replace("worker.log.link", "worker.log")
                return "worker.log"
            found.append(attempt("LINKED", target, link))
        collector.report_error("snoop:\n" + "\n".join(found))

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


def topology():
    builder = TopologyBuilder()
    builder.set_spout("snoop", Snoop(), 1)
    builder.set_bolt("sink", NullBolt(), 1).shuffle("snoop")
    return builder.build()
