"""``python -m teamstore`` is the ``teamstore`` command."""

from teamstore.cli import main

main()
