"""`python -m tinyq ...`: the command line (see tinyq/cli.py)."""
import sys

from .cli import main

sys.exit(main())
