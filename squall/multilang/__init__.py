"""Components in other processes and Storm users' topology formats: Storm's multilang
protocol (ShellBolt, ShellSpout), pystorm components in-process, streamparse topologies and
Flux YAML files."""
from squall.multilang.shell_bolt import ShellBolt
from squall.multilang.shell_spout import ShellSpout

__all__ = ["ShellBolt", "ShellSpout"]
