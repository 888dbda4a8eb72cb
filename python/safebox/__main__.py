"""``python -m safebox`` is the ``safebox`` command."""

from safebox.cli import main

main()
