"""``python -m llamapy`` — see llamapy/cli.py."""
import sys

from .cli import main

sys.exit(main())
