"""The names this package is published under.

The import name is ``llamapy``; the distribution name on PyPI is different,
because ``llamapy`` there belongs to an unrelated 2020 package (as Pillow
keeps ``import PIL``). Hints that tell users what to install use DIST_NAME."""
from __future__ import annotations

DIST_NAME = "llamapy-engine"
