"""``python -m spade_core.cli``: the ``spade`` console script without the installed entry point."""

from spade_core.cli import main

main()
