"""One-line errors: what went wrong and what to do, never a traceback.

A command raises :class:`UserError` (or lets a ``ValueError`` from settings
validation become one through :func:`user_errors`); :func:`earm_jax.cli.main.run`
prints it as a single ``error: ...`` line on stderr and exits with status 2.
Click's own usage errors (unknown option, bad integer) get the same treatment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class UserError(Exception):
    """A mistake the user can fix: ``problem`` and the ``fix``, one line."""

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = " ".join(str(problem).split())
        self.fix = " ".join(str(fix).split())
        super().__init__(self.line())

    def line(self) -> str:
        return f"error: {self.problem}" + (f" — {self.fix}" if self.fix else "")


@contextlib.contextmanager
def user_errors(fix: str, *kinds: type[BaseException]) -> Iterator[None]:
    """Turns ``kinds`` (default ``ValueError``) raised inside into a
    :class:`UserError` whose fix is ``fix``."""
    caught: tuple[type[BaseException], ...] = kinds or (ValueError,)
    try:
        yield
    except UserError:
        raise
    except caught as error:
        raise UserError(str(error) or type(error).__name__, fix) from error


__all__ = ["UserError", "user_errors"]
