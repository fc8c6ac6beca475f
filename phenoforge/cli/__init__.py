"""``python -m phenoforge``: build, search, look up, benchmark, sweep, runs, and the library commands.

One module per command group (``build``, ``search``, ``benchmark``, ``sweep``, ``runs``, ``agent``,
``library``), each adding its commands with ``register``; groups owned by lower packages (Athena's,
the agreement line's, the scale library's) add theirs with their own ``register_cli``. Every handler
returns an exit code; user errors print one line, no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from phenoforge.errors import PhenoforgeError
from phenoforge.memory import fix_mmap_threshold


def build_parser() -> argparse.ArgumentParser:
    from phenoforge.athena import register_cli as register_athena_commands
    from phenoforge.cli import agent, benchmark, build, compare, library, runs, search, sweep, versions
    from phenoforge.eval.agreement import register_cli as register_agreement_commands
    from phenoforge.libraries.scale import register_cli as register_scale_commands

    parser = argparse.ArgumentParser(prog="python -m phenoforge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (build, search, benchmark, sweep, runs, compare, versions):
        group.register(sub)
    library_parser = sub.add_parser("library", help="cohort libraries: import, list, fetch-ohdsi")
    library_sub = library_parser.add_subparsers(dest="library_command", required=True)
    agent.register_cli(sub)
    register_agreement_commands(sub)
    library.register_cli(library_sub)
    register_athena_commands(library_sub)
    register_scale_commands(library_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    fix_mmap_threshold()  # batch work frees many large arrays: give them back to the system (peak RSS, issue 11)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        # every tqdm bar, the model loader's "Loading weights" included, reads TQDM_ options from the environment
        os.environ["TQDM_DISABLE"] = "1"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        return int(args.func(args) or 0)
    except PhenoforgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader closed the pipe (`| head`): stop quietly as other command-line tools do; stdout goes to
        # /dev/null so the interpreter's last flush at exit does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


if __name__ == "__main__":
    sys.exit(main())
