"""`export-matrix`: list cells, sweep them, collect the matrix. Hydra overrides follow the subcommand."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from .config import ConfigError, compose_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-matrix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--config-dir", type=Path, default=None,
                       help="your own config groups, searched before the package's conf/")
        p.add_argument("overrides", nargs="*", help="Hydra overrides: matrix=tracking out_dir=DIR key=value ...")
        return p

    command("cells", "print the selected matrix's cells, one id a line (the dry run)")
    command("sweep", "run every cell of the selected matrix and write its record")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"export-matrix: error: {exc}", file=sys.stderr)
        return 2


def cmd_cells(args: argparse.Namespace) -> int:
    from .cells import resolve

    for spec in resolve(compose_config(args.overrides, args.config_dir)):
        print(spec.id)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from .cells import resolve
    from .launch import summarize, sweep_local

    composed = compose_config(args.overrides, args.config_dir)
    specs = resolve(composed)
    launcher = composed.cfg.launcher
    out_dir = Path(composed.cfg.out_dir)
    console = Console(stderr=True)
    console.print(f"[bold]{len(specs)} cells[/] of matrix {composed.choices.get('matrix')} "
                  f"on launcher {launcher.name}, records under {out_dir}/cells/")
    if launcher.name != "local":
        raise ConfigError(f"unknown launcher {launcher.name!r} (valid: local)")
    records = sweep_local(specs, out_dir, int(launcher.parallel), float(launcher.poll_s), console)
    console.print(f"[bold]done:[/] {summarize(records)}")
    return 1 if any(r["status"] == "error" for r in records) else 0


COMMANDS = {"cells": cmd_cells, "sweep": cmd_sweep}


if __name__ == "__main__":
    sys.exit(main())
