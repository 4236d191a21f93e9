"""Command-line interface: ``python -m llamapy <command>``.

Commands are small modules imported on demand, so ``inspect`` does not pay for
loading the generation code. Each returns a process exit status.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .inspect_cmd import run_inspect

    return run_inspect(args.file, show_tensors=not args.no_tensors)


def _cmd_info(args: argparse.Namespace) -> int:
    from .system import system_info

    print(json.dumps(system_info(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llamapy", description="Run GGUF language models in-process.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    sp = sub.add_parser("inspect", help="print a GGUF file's architecture, quantization mix and tensors")
    sp.add_argument("file", help="path to a .gguf file")
    sp.add_argument("--no-tensors", action="store_true", help="omit the tensor table")
    sp.set_defaults(func=_cmd_inspect)

    sp = sub.add_parser("info", help="print the build and CPU information (system_info) as JSON")
    sp.set_defaults(func=_cmd_info)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
