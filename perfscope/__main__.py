"""``python -m perfscope`` runs the CLI."""
import sys

from perfscope.cli.main import main

sys.exit(main())
