"""What every ``duplex-es`` subcommand shares, built in or added by another package: the error
reported in one line, and the argument types of numeric options.

These live outside :mod:`duplex_es.cli.main` because ``python -m duplex_es.cli.main`` runs that
module as ``__main__``: a command module importing ``CliError`` from ``duplex_es.cli.main`` would
get a second copy of the class, which ``main``'s ``except CliError`` would not catch.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from duplex_es.errors import DuplexError

__all__ = ["CliError", "positive_int", "non_negative_int", "positive_float", "port"]


class CliError(DuplexError):
    """A problem to report in one line, without a traceback (``duplex-es`` exits 2)."""


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1.

    Raises:
        argparse.ArgumentTypeError: not an integer, or below 1.
    """
    value = _number(text, int)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0.

    Raises:
        argparse.ArgumentTypeError: not an integer, or negative.
    """
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0.

    Raises:
        argparse.ArgumentTypeError: not a number, not finite, or not above 0.
    """
    value = _number(text, float)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0..65535 (0: let the system choose).

    Raises:
        argparse.ArgumentTypeError: not an integer in range.
    """
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 0..65535, got {text}")
    return value
