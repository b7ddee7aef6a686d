"""Subcommands that other installed packages add to ``duplex-es``, found by entry point.

The runtime never imports the tooling that ships beside it (``duplex_es_tools``: ``demo``,
``chaos``, ``bench``, ``loadgen``): import-linter forbids it, so that serving sessions never
depends on a benchmark's or a load generator's packages. Instead a package declares its commands
in the entry-point group :data:`ENTRY_POINT_GROUP` (``pyproject.toml``,
``[project.entry-points."duplex_es.commands"]``), each naming a :class:`ToolCommand`, and the CLI
adds them when it builds its parser.

A command whose dependencies are missing still exists and fails with one line naming the extra
to install (exit 2, no traceback): when its entry point cannot be loaded, when a module in its
:attr:`ToolCommand.requires` is absent, or when its run stops on a missing module. So do the
project's own tool commands (:data:`TOOL_COMMANDS`) when no entry point names them (the tooling
is not installed, or the install predates this group).
"""

from __future__ import annotations

import argparse
import importlib.util
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Collection, Sequence

import attrs

from duplex_es.cli.arguments import CliError

__all__ = ["ENTRY_POINT_GROUP", "TOOLS_EXTRA", "TOOL_COMMANDS", "ToolCommand", "add_tool_commands"]

#: The entry-point group whose entries name a :class:`ToolCommand`; the entry's name is the
#: subcommand's (``bench = "duplex_es_tools.commands:BENCH"``).
ENTRY_POINT_GROUP = "duplex_es.commands"

#: The project's own tool commands and the extra that installs what they need. Only names: the
#: CLI lists them so that they say what to install where their entry points are missing.
TOOLS_EXTRA = "tools"
TOOL_COMMANDS = ("bench", "chaos", "demo", "loadgen")

#: The distribution named in an install hint when an entry point does not say which it came from.
DISTRIBUTION = "duplex-es"


@attrs.frozen
class ToolCommand:
    """A subcommand another package adds to ``duplex-es``: what an entry point of
    :data:`ENTRY_POINT_GROUP` names.

    Its module should import little: every ``duplex-es`` invocation loads it to build the parser,
    so ``run`` imports the command's implementation when the command runs.

    Attributes:
        help: one line for ``duplex-es --help``.
        add_arguments: adds the command's options to its subparser, which already has ``--db``
            and ``--log-level``.
        run: ``run(args, console) -> exit code`` with the parsed arguments and the CLI's rich
            console. It may raise :class:`~duplex_es.cli.arguments.CliError`, ``ValueError`` or
            ``OSError``: reported in one line, exit 2.
        extra: the extra of the providing distribution that installs the command's dependencies;
            named in the message when one is missing.
        requires: top-level import names the command needs beyond duplex_es's own dependencies
            (e.g. ``("eventsourcing", "hdrh")``). They are looked up, not imported, before ``run``,
            so a missing one fails at once rather than part-way through a run.
    """

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Any], int]
    extra: str = TOOLS_EXTRA
    requires: tuple[str, ...] = ()


def _install_hint(distribution: str, extra: str) -> str:
    return f"install the extra {extra!r}: pip install '{distribution}[{extra}]'"


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a dotted name whose parent is missing; a module without a spec
        return True


def _add_unavailable(sub: Any, parents: Sequence[argparse.ArgumentParser], name: str, message: str) -> None:
    """A subcommand that only fails with ``message``. It accepts any arguments (``main`` lets
    unknown ones through when ``args.unavailable`` is set), so that ``duplex-es bench --quick``
    gets this message rather than an argparse error about ``--quick``."""
    p = sub.add_parser(name, parents=list(parents), help=f"(unavailable: {message})")

    def unavailable(args: argparse.Namespace) -> int:
        raise CliError(message)

    p.set_defaults(func=unavailable, unavailable=True)


def _runner(command: ToolCommand, entry: EntryPoint, distribution: str, console: Any) -> Callable[[argparse.Namespace], int]:
    own_package = entry.module.partition(".")[0]

    def run(args: argparse.Namespace) -> int:
        missing = [m for m in command.requires if _absent(m)]
        if missing:
            raise CliError(f"needs the module{'s' if len(missing) > 1 else ''} {', '.join(missing)}, not installed; {_install_hint(distribution, command.extra)}")
        try:
            return command.run(args, console)
        except ModuleNotFoundError as exc:
            # A dependency ``requires`` did not list. A module of the project itself missing is a
            # bug, not a missing extra: let it raise with its traceback.
            top = (exc.name or "").partition(".")[0]
            if not top or top in ("duplex_es", own_package):
                raise
            raise CliError(f"needs the module {top}, not installed; {_install_hint(distribution, command.extra)}") from exc

    return run


def add_tool_commands(sub: Any, parents: Sequence[argparse.ArgumentParser], console: Any, taken: Collection[str]) -> list[str]:
    """Add a subparser for every command in :data:`ENTRY_POINT_GROUP`, and an unavailable one
    for each of :data:`TOOL_COMMANDS` no entry point provides.

    Args:
        sub: the ``add_subparsers()`` action of the ``duplex-es`` parser.
        parents: parsers whose options every subcommand takes (``--db``, ``--log-level``).
        console: the rich console handed to each command's ``run``.
        taken: names already used by built-in commands; an entry point cannot replace one.

    Returns:
        The names added: the entry points' sorted by name (so ``--help`` does not depend on
        install order), then the missing tool commands.
    """
    added: list[str] = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if entry.name in taken or entry.name in added:
            continue
        distribution = entry.dist.name if entry.dist is not None else DISTRIBUTION
        try:
            command = entry.load()
        except (ImportError, AttributeError) as exc:  # the package or its module is gone, or predates the entry
            # Our own tooling has an extra to name; another package's plugin can only be reinstalled.
            hint = _install_hint(distribution, TOOLS_EXTRA) if distribution == DISTRIBUTION else f"reinstall {distribution}"
            _add_unavailable(sub, parents, entry.name, f"could not be loaded ({exc}); {hint}")
        else:
            if isinstance(command, ToolCommand):
                p = sub.add_parser(entry.name, parents=list(parents), help=command.help)
                command.add_arguments(p)
                p.set_defaults(func=_runner(command, entry, distribution, console))
            else:  # one broken plugin must not take every other command down with it
                _add_unavailable(sub, parents, entry.name, f"entry point {entry.name} = {entry.value} in {ENTRY_POINT_GROUP} is not a ToolCommand")
        added.append(entry.name)
    for name in TOOL_COMMANDS:
        if name not in added and name not in taken:
            reason = "comes with duplex_es's tooling (duplex_es_tools), which is not installed here"
            _add_unavailable(sub, parents, name, f"{reason}; {_install_hint(DISTRIBUTION, TOOLS_EXTRA)}")
            added.append(name)
    return added
