"""A plain topology: fixed rows into a null bolt (what takes a slot after a hostile one)."""
from tenant import one_spout

from squall.testing.components import FixedTupleSpout


def topology():
    return one_spout("rows", FixedTupleSpout("rows", [[i] for i in range(1000)], ["n"], reliable=False))
