"""`export-matrix`: list cells, sweep or rerun them, build torch environments. Hydra overrides come last."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from rich.markup import escape

from .config import ConfigError, check_out_dir, compose_config
from .config.fingerprint_cache import remember
from .console import stderr_console
from .launchers.common import Interrupted


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-matrix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, parent: argparse._SubParsersAction = sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text)
        p.add_argument("--config-dir", type=Path, default=None,
                       help="your own config groups, searched before the package's conf/")
        return p

    def overrides(p: argparse.ArgumentParser) -> None:
        p.add_argument("overrides", nargs="*", help="Hydra overrides: matrix=tracking out_dir=DIR key=value ...")

    overrides(command("cells", "print the selected matrix's cells, one id a line (the dry run)"))
    sweep = command("sweep", "run every cell of the selected matrix and write its record")
    overrides(sweep)
    rerun = command("rerun", "run again the named cells (ids or patterns), the failed ones or the stale ones")
    for p in (sweep, rerun):  # launcher=slurm: submit and return, unless --wait
        p.add_argument("--wait", action="store_true", help="launcher=slurm: block until every submitted cell ended")
        p.add_argument("--force", action="store_true",
                       help="launcher=slurm: cancel and submit again cells whose jobs are still pending or running")
    rerun.add_argument("cells", nargs="*", help="cell ids or patterns (wall_x/a100/*), then Hydra overrides")
    rerun.add_argument("--failed", action="store_true", help="every recorded cell that did not pass")
    rerun.add_argument("--stale", action="store_true", help="every cell whose config or environment changed")
    overrides(command("status", "show the recorded cells, with stale ones marked (Slurm jobs asked through sacct)"))
    show = command("show", "print a cell's resolved configs, fingerprint, job environment and exact command lines, "
                           "running nothing")
    show.add_argument("cell", help="a cell id (policy/gpu/torch, in the matrix or not), or a pattern ('act/*/*'): "
                                   "every cell of the selected matrix it matches, one YAML document each")
    overrides(show)
    wait = command("wait", "follow a Slurm sweep (DIR/manifest.json) until every cell has ended")
    wait.add_argument("--poll-s", type=float, default=None, help="seconds between sacct calls (default: the sweep's)")
    overrides(wait)
    collect = command("collect", "rebuild the tracking table (matrix.md, report.html, CSVs) from the records")
    collect.add_argument("--into", type=Path, default=None, metavar="FILE",
                         help="also put the table between FILE's export-matrix start/end markers")
    collect.add_argument("--check", action="store_true",
                         help="write nothing; exit 1 if FILE or out_dir's tables are out of date with the records")
    overrides(collect)
    repro = command("repro", "a standalone script for each failure of a failed cell, cut from its kept exported "
                             "programs and run in its build (docs/repros.md)")
    repro.add_argument("cell", help="a recorded cell id, or a pattern ('*/h100/*': each failed cell it matches)")
    repro.add_argument("--seconds", type=_positive, default=600.0,
                       help="the search's time bound per cell (default: 600)")
    repro.add_argument("--regenerate", action="store_true",
                       help="search again from the kept programs even where scripts exist (else they are only rerun)")
    overrides(repro)
    env = sub.add_parser("env", help="torch build environments").add_subparsers(dest="env_command", required=True)
    build = command("build", "create a torch build's environment from its recipe (uv, patches)", env)
    build.add_argument("name", help="the torch build's config name")
    build.add_argument("--wheelhouse", type=Path, default=None, metavar="DIR",
                       help="install offline from DIR, made by `env wheelhouse NAME DIR`")
    overrides(build)
    wheelhouse = command("wheelhouse", "download a torch build's wheels into DIR for offline `env build`", env)
    wheelhouse.add_argument("name", help="the torch build's config name")
    wheelhouse.add_argument("dir", type=Path, help="the folder for its wheels and pinned requirements")
    overrides(wheelhouse)
    overrides(command("list", "show the torch builds and the state of their environments", env))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)  # overrides may sit on either side of --config-dir
    unknown_options = [a for a in extra if a.startswith("-")]
    if unknown_options:
        parser.error(f"unrecognized arguments: {' '.join(unknown_options)}")
    if hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        args.cells = [*args.cells, *extra]
    if args.command == "rerun":  # ids and overrides share the positional list
        args.overrides = [a for a in args.cells if _is_override(a)]
        args.cells = [a for a in args.cells if not _is_override(a)]
    name = f"env_{args.env_command}" if args.command == "env" else args.command
    not_overrides = [a for a in getattr(args, "overrides", []) if not _is_override(a)]
    if not_overrides:
        print(f"export-matrix: error: {not_overrides[0]!r} is not a Hydra override (key=value, +key=value or ~key)"
              + (f"; a results folder goes in as out_dir={not_overrides[0]}" if "/" in not_overrides[0] else ""),
              file=sys.stderr)
        return 2
    previous = _on_sigterm(_interrupt)  # SIGTERM stops a sweep as Ctrl-C does
    try:
        code = COMMANDS[name](args)
        sys.stdout.flush()  # a reader that went away shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except (KeyboardInterrupt, Interrupted) as exc:
        cancelled = f"{len(exc.cancelled)} cells cancelled, " if isinstance(exc, Interrupted) else ""
        retry = " ".join(["export-matrix rerun --failed", *getattr(args, "overrides", [])])
        print(f"interrupted: {cancelled}records kept; rerun with: {retry}", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"export-matrix: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # disk full, a folder that vanished: one line, the records settle later (owner.py)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"export-matrix: error: {where}{exc.strerror or exc}; unfinished cells are settled by the next "
              "status, sweep or rerun", file=sys.stderr)
        return 1
    finally:
        _on_sigterm(previous)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _reader_gone() -> int:
    """The output's reader went away (`export-matrix cells | head -2`): end quietly as cat does, killed by SIGPIPE
    (the shell's status 141). Python ignores SIGPIPE and raises BrokenPipeError instead, which said
    'error: Broken pipe' and exited 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):  # nothing left to flush into the closed pipe
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 128 + signal.SIGPIPE  # not reached: the signal ends the process


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _on_sigterm(handler: object) -> object:
    """Install a SIGTERM handler where this thread may (the main one); the one it replaced."""
    try:
        return signal.signal(signal.SIGTERM, handler)  # type: ignore[arg-type]
    except (ValueError, TypeError):  # not the main thread, or no handler to put back
        return None


def _is_override(arg: str) -> bool:
    return "=" in arg or arg.startswith(("~", "+"))


def cmd_cells(args: argparse.Namespace) -> int:
    from .config.cells import resolve

    for spec in resolve(compose_config(args.overrides, args.config_dir)):
        print(spec.id)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from .config.cells import resolve

    composed = compose_config(args.overrides, args.config_dir)
    specs = resolve(composed, with_fingerprints=True)
    remember(Path(composed.cfg.out_dir), specs, args.overrides, args.config_dir)
    return _launch(specs, composed, f"matrix {composed.choices.get('matrix')}", args.wait, args.force)


def cmd_rerun(args: argparse.Namespace) -> int:
    from .config.selection import select

    if not (args.cells or args.failed or args.stale):
        raise ConfigError("rerun needs cell ids or patterns, --failed or --stale")
    composed = compose_config(args.overrides, args.config_dir)
    out_dir = check_out_dir(Path(composed.cfg.out_dir))
    specs = select(out_dir, args.cells, args.failed, args.stale, args.overrides, args.config_dir)
    if not specs:
        stderr_console().print("nothing to rerun")
        return 0
    remember(Path(composed.cfg.out_dir), specs, args.overrides, args.config_dir)
    return _launch(specs, composed, "rerun", args.wait, args.force)


def _launch(specs: list, composed, what: str, wait: bool = False, force: bool = False) -> int:
    from .launchers import launcher_for
    from .launchers.prepare import build_missing_envs
    from .launchers.sweep_lock import sweep_lock

    out_dir = Path(composed.cfg.out_dir)
    console = stderr_console()
    launcher = launcher_for(composed.cfg.launcher)  # its settings checked before anything is written
    with sweep_lock(out_dir, what):
        console.print(f"[bold]{len(specs)} cells[/] of {escape(what)} on launcher "
                      f"{escape(str(composed.cfg.launcher.name))}, records under {escape(str(out_dir))}/cells/")
        specs, refused = build_missing_envs(specs, console)
        return launcher.launch(specs, refused, out_dir, what, console, wait=wait, force=force)


def cmd_show(args: argparse.Namespace) -> int:
    from .status.cell_show import show_cells

    out_dir_of(args)
    print(show_cells(args.cell, args.overrides, args.config_dir), end="")
    return 0


def out_dir_only(overrides: list[str]) -> list[str]:
    """The overrides with the matrix emptied (and no override of its axes): enough for out_dir, without composing
    every policy it names."""
    skipped = ("matrix", "policies", "gpus", "builds", "exporters")
    kept = [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] not in skipped]
    return [*kept, "matrix.policies=[]", "matrix.gpus=[]", "matrix.torch=[]", "matrix.include=[]",
            "matrix.exclude=[]"]


def out_dir_of(args: argparse.Namespace) -> Path:
    """The command's out_dir (composed without the matrix, cached), refused where it is a file."""
    from .config.config_cache import composed_out_dir

    return check_out_dir(composed_out_dir(out_dir_only(args.overrides), args.config_dir))


def cmd_status(args: argparse.Namespace) -> int:
    from .status import show_status

    return show_status(out_dir_of(args), args.overrides, args.config_dir)


def cmd_wait(args: argparse.Namespace) -> int:
    from .launchers.slurm.commands import wait_command
    from .status import show_status

    out_dir = out_dir_of(args)
    return wait_command(out_dir, args.poll_s,
                        lambda cells: show_status(out_dir, args.overrides, args.config_dir, polled=cells))


def cmd_collect(args: argparse.Namespace) -> int:
    from .collect import run_collect

    out_dir_of(args)
    return run_collect(args.overrides, args.config_dir, args.into, args.check)


def cmd_repro(args: argparse.Namespace) -> int:
    from .repro_cell import run_repro

    return run_repro(out_dir_of(args), args.cell, args.overrides, args.config_dir, args.seconds, args.regenerate)


def _recipe(args: argparse.Namespace):
    from .config.cells import recipes

    composed = compose_config([f"matrix.torch=[{args.name}]", *args.overrides], args.config_dir)
    found = recipes(composed)
    if args.name not in found:
        raise ConfigError(f"torch build {args.name!r} has no recipe (pip: or lerobot:) to build "
                          f"(builds with one: {', '.join(sorted(found)) or 'none'})")
    return found[args.name]


def cmd_env_build(args: argparse.Namespace) -> int:
    from .envs import EnvBuildError, build_env_logged

    recipe = _recipe(args)
    console = stderr_console()
    offline = f", offline from {args.wheelhouse}" if args.wheelhouse else ""
    console.print(escape(f"building {args.name} in {recipe.path} ({', '.join(recipe.requirements)}{offline})"))
    try:
        python = build_env_logged(recipe, args.wheelhouse)
    except EnvBuildError as exc:
        print(f"export-matrix: error: torch build {args.name}: {exc}", file=sys.stderr)
        return 1
    console.print(f"[green]built[/] {escape(str(python))}")
    return 0


def cmd_env_wheelhouse(args: argparse.Namespace) -> int:
    from .envs import EnvBuildError
    from .envs.wheelhouse import make_wheelhouse_logged

    recipe = _recipe(args)
    console = stderr_console()
    console.print(escape(f"downloading the wheels of {args.name} into {args.dir}"))
    try:
        lock = make_wheelhouse_logged(recipe, args.dir)
    except EnvBuildError as exc:
        print(f"export-matrix: error: torch build {args.name}: {exc}", file=sys.stderr)
        return 1
    console.print(f"[green]wheelhouse[/] {escape(str(lock))}: "
                  f"export-matrix env build {escape(args.name)} --wheelhouse {escape(str(args.dir))}")
    return 0


def cmd_env_list(args: argparse.Namespace) -> int:
    from .config import to_plain
    from .config.cells import recipes

    names = compose_config(args.overrides, args.config_dir).options["torch"]
    composed = compose_config([f"matrix.torch=[{','.join(names)}]", *args.overrides], args.config_dir)
    found = recipes(composed)
    for name in names:
        build = to_plain(composed.cfg.builds[name])
        if build.get("python"):
            python = Path(build["python"]).expanduser()
            state = "ready" if python.exists() else "missing interpreter"
            print(f"{name:12s} {state:20s} {python}")
        elif name in found:
            recipe = found[name]
            print(f"{name:12s} {'built' if recipe.built else 'not built':20s} {recipe.path}")
        else:
            print(f"{name:12s} {'ready':20s} {sys.executable} (the orchestrator's own)")
    return 0


COMMANDS = {"cells": cmd_cells, "sweep": cmd_sweep, "rerun": cmd_rerun, "status": cmd_status, "show": cmd_show,
            "collect": cmd_collect, "repro": cmd_repro,
            "wait": cmd_wait, "env_build": cmd_env_build, "env_list": cmd_env_list,
            "env_wheelhouse": cmd_env_wheelhouse}


if __name__ == "__main__":
    sys.exit(main())
