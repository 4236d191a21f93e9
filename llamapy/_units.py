"""Sizes and counts as people read them (one formatting for every report)."""
from __future__ import annotations


def format_bytes(n: int) -> str:
    """1536 -> '1.50 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{n} B"


def format_count(n: int) -> str:
    """268098176 -> '268.10 M'."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f} {suffix}"
    return str(n)
