"""``python -m datakit`` runs the ``datakit`` command."""

from datakit.cli import main

main()
