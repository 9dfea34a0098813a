"""``python -m squall.cli``: the same as the ``squall`` console script."""
import sys

from squall.cli import main

sys.exit(main())
