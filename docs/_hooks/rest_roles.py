"""Griffe extension: the docstrings' reST roles rendered on the API page.

The docstrings are Google style but name other objects with Sphinx roles
(``:func:`run```, ``:class:`~earm_jax.base.Policy```, ``:math:`\\mu```), which
Markdown would show as literal text. Before the docstrings are parsed, each
role becomes inline code: an object role is wrapped in an optional
cross-reference (a link where the page documents the object, plain code where
it does not, never a build warning), and a math role shows its TeX with the
common Greek letters and operators as Unicode.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?P<role>[a-z]+):`(?P<target>[^`]+)`")
OBJECT_ROLES = {"func", "class", "mod", "meth", "attr", "data", "obj", "exc"}
TEX = {
    r"\hat y": "ŷ",
    r"\lambda": "λ",
    r"\sigma": "σ",
    r"\mu": "μ",
    r"\cdot": "·",
}


def _identifier(owner: griffe.Object, target: str) -> str:
    """The full path ``target`` names from ``owner``'s scope (as written when
    it does not resolve)."""
    if target.startswith("earm_jax."):
        return target
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = owner
    while scope is not None:
        try:
            resolved = scope.resolve(head)
        except (griffe.NameResolutionError, griffe.AliasResolutionError):
            scope = scope.parent
            continue
        return f"{resolved}.{rest}" if rest else resolved
    return target


def _math(tex: str) -> str:
    for command, symbol in TEX.items():
        tex = tex.replace(command, symbol)
    return f"`{tex}`"


def rewrite(text: str, owner: griffe.Object) -> str:
    """``text`` with every role replaced (see the module docstring)."""

    def replace(match: re.Match[str]) -> str:
        # A role may wrap across docstring lines: math keeps single spaces,
        # a dotted name none.
        role, words = match["role"], match["target"].split()
        if role == "math":
            return _math(" ".join(words))
        target = "".join(words)
        if role not in OBJECT_ROLES:
            return f"`{target}`"
        shown = target.lstrip("~")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
        identifier = html.escape(_identifier(owner, target.lstrip("~")), quote=True)
        return (
            f'<autoref identifier="{identifier}" optional>'
            f"<code>{html.escape(shown)}</code></autoref>"
        )

    return ROLE.sub(replace, text)


class RestRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        pending: list[griffe.Object] = [pkg]
        while pending:
            obj = pending.pop()
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj.docstring.value, obj)
            pending.extend(
                member for member in obj.members.values() if not member.is_alias
            )
