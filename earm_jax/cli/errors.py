"""One-line errors: what went wrong and what to do, never a traceback.

A command raises :class:`UserError` (or lets a ``ValueError`` from settings
validation become one through :func:`user_errors`, which names the flag where the
settings named their field); :func:`earm_jax.cli.main.run`
prints it as a single ``error: ...`` line on stderr and exits with status 2.
Click's own usage errors (unknown option, bad integer) get the same treatment.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping


class UserError(Exception):
    """A mistake the user can fix: ``problem`` and the ``fix``, one line."""

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = " ".join(str(problem).split())
        self.fix = " ".join(str(fix).split())
        super().__init__(self.line())

    def line(self) -> str:
        return f"error: {self.problem}" + (f" — {self.fix}" if self.fix else "")


FLAG_OF_FIELD: Mapping[str, str] = {
    "num_resamples": "--resamples",
    "ks": "--top-k",
    "scorer_noise": "--noise",
}
"""Settings fields whose command-line flag is not ``--`` + the field's name
with dashes."""

_SETTINGS_FIELD = re.compile(r"\b[A-Z]\w*Settings\.([a-z][a-z0-9_]*)\b")


def flag_names(message: str) -> str:
    """Names the flag where a settings error names the field: the user typed
    ``--pool-size``, not ``SimulationSettings.pool_size``.

    >>> flag_names("SimulationSettings.num_resamples must be >= 1, got 0")
    '--resamples must be >= 1, got 0'
    """

    def flag(match: re.Match[str]) -> str:
        field = match.group(1)
        return FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))

    return _SETTINGS_FIELD.sub(flag, message)


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
        raise UserError(flag_names(str(error)) or type(error).__name__, fix) from error


__all__ = ["FLAG_OF_FIELD", "UserError", "flag_names", "user_errors"]
