"""The docs' results tables, generated from the committed result JSONs
(``earm results``).

Which JSON feeds which table is data, not code: the results folder's
``tables.json`` declares each table (its default ``source`` JSON, its
``columns``, its ``rows``) and the other ``folders`` a source JSON may sit in
(``../../experiments/results``, searched after the results folder), and a page
shows a table between two marker comments::

    <!-- results:locomo-headline -->
    ...generated, never edited by hand...
    <!-- /results:locomo-headline -->

A column is a header, the ``values`` it reads (paths into the row's JSON, ``/``
between keys, since keys hold dots such as ``turns:0.1:0``) and a Python
``format`` string over them (``{0:.3f} [{1:.3f}, {2:.3f}]``). Paths and formats
may name the row's own fields (``results/{policy}/recall@10/mean``, ``{label}``),
and a row may override a column's format by header (to set a number in bold).
In a list, a path step ``key=value`` (``,`` between several) picks the one item
whose fields have those values (``runs/setting=turns,rank=8``); a value may also
be ``{"ratio": [path, path]}``, the first over the second (a share of Full's
calls). A value its format does not use is not read, so an empty format leaves
a cell blank where the JSON has nothing to show.

A column may read its own ``source`` (one JSON per column, as for two runs side
by side); a column with neither ``values`` nor ``format`` shows each row's own
``values`` in the row's ``format`` (a table whose rows are measures, not
policies). Under each table, one line per source JSON says where its rows came
from: the command, commit, date and machine the JSON recorded, or that it
recorded none.

Everything here is pure (texts and parsed JSONs in, texts out); reading and
writing files is the caller's.

Example:
    >>> spec = read_table_list({"tables": {"demo": {
    ...     "source": "run.json",
    ...     "columns": [
    ...         {"header": "policy", "format": "{label}"},
    ...         {"header": "R@10", "values": ["results/{key}"], "format": "{0:+.2f}"},
    ...     ],
    ...     "rows": [{"key": "a", "label": "A"}, {"key": "b", "label": "B"}],
    ... }}})
    >>> run = {"results": {"a": 0.5, "b": -0.25}, "command": "earm simulate"}
    >>> print(render_table(spec["demo"], {"run.json": run}))
    | policy | R@10 |
    | --- | --- |
    | A | +0.50 |
    | B | −0.25 |
    <BLANKLINE>
    Source: `run.json`, `earm simulate`; commit not recorded, date not recorded, ...
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

TABLE_LIST = "tables.json"
"""The name of the table list in a results folder."""

MARKED_TABLE = re.compile(
    r"(?P<open><!-- results:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /results:(?P=name) -->)",
    re.S,
)
"""A generated table on a page: its opening marker, body and closing marker."""

NOT_RECORDED = "not recorded"


Value = str | Mapping[str, Any]
"""A path into a JSON, or ``{"ratio": [path, path]}``."""


class Column(NamedTuple):
    """One column: ``format`` over the ``values`` read at these paths, in
    ``source`` where the column names its own JSON; without ``format``, each
    row's own ``values`` and ``format``."""

    header: str
    values: tuple[Value, ...]
    format: str | None
    source: str | None = None


class TableSpec(NamedTuple):
    """One generated table, as ``tables.json`` declares it."""

    name: str
    source: str | None
    columns: tuple[Column, ...]
    rows: tuple[Mapping[str, Any], ...]

    def row_sources(self) -> list[str]:
        """The result JSONs its rows name for the columns without their own,
        in order of first use (none where every column names its own)."""
        own = [column.source for column in self.columns]
        if any(own) and all(c.source or not _reads(c) for c in self.columns):
            return []
        found = [row.get("source", self.source) for row in self.rows]
        return list(dict.fromkeys(found))

    def sources(self) -> list[str]:
        """Every result JSON the table reads, in order of first use."""
        found = self.row_sources() + [c.source for c in self.columns if c.source]
        return list(dict.fromkeys(found))


class Provenance(NamedTuple):
    """Where a result JSON came from, as far as it recorded it."""

    command: str
    commit: str
    date: str
    machine: str


def _reads(column: Column) -> bool:
    """Whether a column reads a JSON: its own values, or each row's."""
    return bool(column.values) or column.format is None


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, str):
        return
    if isinstance(value, Mapping) and set(value) == {"ratio"}:
        ratio = value["ratio"]
        if isinstance(ratio, list) and len(ratio) == 2:
            if all(isinstance(path, str) for path in ratio):
                return
    raise ValueError(f"table {name!r}: a value is a path or {{'ratio': [path, path]}}")


def _table(name: str, entry: Mapping[str, Any]) -> TableSpec:
    columns = tuple(
        Column(
            header=column["header"],
            values=tuple(column.get("values", ())),
            format=column.get("format"),
            source=column.get("source"),
        )
        for column in entry["columns"]
    )
    rows = tuple(entry["rows"])
    source = entry.get("source")
    spec = TableSpec(name, source, columns, rows)
    needs_source = bool(spec.row_sources())
    for column in columns:
        if column.format is None and column.values:
            raise ValueError(f"table {name!r} column {column.header!r} has no format")
        for value in column.values:
            _check_value(name, value)
    for number, row in enumerate(rows):
        if needs_source and row.get("source", source) is None:
            raise ValueError(f"table {name!r} row {number} has no source JSON")
        unknown = set(row.get("formats", {})) - {column.header for column in columns}
        if unknown:
            raise ValueError(
                f"table {name!r} row {number} formats unknown columns {sorted(unknown)}"
            )
        if any(c.format is None for c in columns) and "format" not in row:
            raise ValueError(
                f"table {name!r} row {number} has no format for the columns "
                "that show each row's own values"
            )
        for value in row.get("values", ()):
            _check_value(name, value)
    return spec


def source_folders(payload: Mapping[str, Any], results: Path) -> list[Path]:
    """The other folders a parsed ``tables.json`` names for its source JSONs
    (``folders``, relative to the results folder), searched after it.

    Raises:
        ValueError: ``folders`` is not a list of folder names.
    """
    folders = payload.get("folders", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise ValueError(f"{TABLE_LIST}: folders is a list of folder names")
    return [results / folder for folder in folders]


def read_table_list(payload: Mapping[str, Any]) -> dict[str, TableSpec]:
    """The tables a parsed ``tables.json`` declares, by name.

    Raises:
        ValueError: a row without a source, or formatting a column that is not there.
        KeyError: a table or column without a required field.
    """
    return {name: _table(name, entry) for name, entry in payload["tables"].items()}


def _pick(items: Sequence[Any], path: str, step: str) -> Any:
    """The one item of a list whose fields match ``key=value,key=value``."""
    wanted = dict(part.split("=", 1) for part in step.split(","))
    found = [
        item
        for item in items
        if isinstance(item, Mapping)
        and all(key in item and str(item[key]) == text for key, text in wanted.items())
    ]
    if len(found) != 1:
        raise KeyError(f"{path!r}: {len(found)} items match {step!r}, not one")
    return found[0]


def lookup(payload: Any, path: str) -> Any:
    """The value at ``path``: keys, list indices or, in a list, ``key=value``
    (``,`` between several) for the one item with those fields, joined by ``/``.

    Raises:
        KeyError: naming the first step of the path that is not there, or a
            ``key=value`` step that picks no item or several.
    """
    value = payload
    for step in path.split("/"):
        if isinstance(value, Sequence) and not isinstance(value, str):
            if "=" in step and all("=" in part for part in step.split(",")):
                value = _pick(value, path, step)
                continue
            try:
                value = value[int(step)]
                continue
            except (ValueError, IndexError):
                raise KeyError(f"{path!r}: no item {step!r}") from None
        if not isinstance(value, Mapping) or step not in value:
            raise KeyError(f"{path!r}: no key {step!r}")
        value = value[step]
    return value


class _NumberFormatter(string.Formatter):
    """``str.format`` whose negative numbers take the typographic minus the
    hand-written pages use (−0.028, not -0.028)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        text = super().format_field(value, format_spec)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = text.replace("-", "−")
        return text


_FORMATTER = _NumberFormatter()


def _used(template: str, count: int) -> set[int]:
    """The positions of the values a format string shows (all, where it
    numbers them automatically with ``{}``)."""
    used: set[int] = set()
    for _, field, _, _ in _FORMATTER.parse(template):
        if field is None:
            continue
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        if head == "":
            return set(range(count))
        if head.isdigit():
            used.add(int(head))
    return used


def _value(payload: Any, value: Value, fields: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return lookup(payload, value.format(**fields))
    numerator, denominator = (
        lookup(payload, path.format(**fields)) for path in value["ratio"]
    )
    return numerator / denominator


def _template(column: Column, row: Mapping[str, Any]) -> str:
    default = column.format if column.format is not None else row["format"]
    return row.get("formats", {}).get(column.header, default)


def cell_values(column: Column, row: Mapping[str, Any], payload: Any) -> list[Any]:
    """The values a cell reads from its JSON, in order (``None`` where its
    format does not show a value, which is then not read).

    Raises:
        KeyError: a path the cell reads is not in ``payload``.
    """
    fields = {key: value for key, value in row.items() if isinstance(value, str)}
    paths = column.values if column.format is not None else tuple(row.get("values", ()))
    used = _used(_template(column, row), len(paths))
    return [
        _value(payload, path, fields) if number in used else None
        for number, path in enumerate(paths)
    ]


def _cell(column: Column, row: Mapping[str, Any], payload: Any) -> str:
    fields = {key: value for key, value in row.items() if isinstance(value, str)}
    values = cell_values(column, row, payload)
    return _FORMATTER.format(_template(column, row), *values, **fields)


def _meta(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The provenance record: the JSON itself, or its ``meta``/``metadata``."""
    for key in ("meta", "metadata"):
        if isinstance(payload.get(key), Mapping):
            return payload[key]
    return payload


def _machine(meta: Mapping[str, Any]) -> str:
    machine = meta.get("machine", meta)
    if not isinstance(machine, Mapping) or "cpu_count" not in machine:
        return f"machine {NOT_RECORDED}"
    model = machine.get("cpu_model") or machine.get("processor")
    cores = f"{machine['cpu_count']} CPUs"
    return f"{cores} ({model})" if model else cores


def provenance(payload: Mapping[str, Any]) -> Provenance:
    """The command, commit, date and machine a result JSON recorded; a field
    it lacks reads "not recorded", never a guess."""
    meta = _meta(payload)
    commit = meta.get("git_commit")
    if commit:
        head, dirty = commit.removesuffix("+dirty"), commit.endswith("+dirty")
        commit = f"commit `{head[:7]}`" + (" with uncommitted changes" if dirty else "")
    date = meta.get("date")
    return Provenance(
        command=meta.get("command") or f"command {NOT_RECORDED}",
        commit=commit or f"commit {NOT_RECORDED}",
        date=str(date)[:10] if date else f"date {NOT_RECORDED}",
        machine=_machine(meta),
    )


def _source_line(source: str, payload: Mapping[str, Any]) -> str:
    where = provenance(payload)
    command = (
        f"`{where.command}`"
        if not where.command.endswith(NOT_RECORDED)
        else where.command
    )
    return f"`{source}`, {command}; {where.commit}, {where.date}, {where.machine}."


def render_table(spec: TableSpec, payloads: Mapping[str, Mapping[str, Any]]) -> str:
    """The table's Markdown, then where its rows came from.

    ``payloads`` maps each source name to its parsed JSON. With several sources
    a last column names each row's; one source is named once, under the table.

    Raises:
        KeyError: a source missing from ``payloads``, or a path not in its JSON
            (the message names the table).
    """
    sources = spec.sources()
    missing = [source for source in sources if source not in payloads]
    if missing:
        raise KeyError(f"table {spec.name!r} reads {missing}, which is not there")
    by_row = len(spec.row_sources()) > 1
    headers = [column.header for column in spec.columns]
    if by_row:
        headers.append("source")
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    for row in spec.rows:
        cells = []
        for column in spec.columns:
            source = column.source or row.get("source", spec.source)
            try:
                cells.append(_cell(column, row, payloads.get(source, {})))
            except KeyError as error:
                raise KeyError(f"table {spec.name!r}, `{source}`: {error}") from None
        if by_row:
            cells.append(f"`{row.get('source', spec.source)}`")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if len(sources) == 1:
        lines.append("Source: " + _source_line(sources[0], payloads[sources[0]]))
    else:
        lines.append("Sources:")
        lines.append("")
        lines.extend(f"- {_source_line(s, payloads[s])}" for s in sources)
    return "\n".join(lines)


def marked_tables(text: str) -> list[str]:
    """The names of the generated tables on a page, in order."""
    return [match["name"] for match in MARKED_TABLE.finditer(text)]


def rewrite_page(text: str, rendered: Mapping[str, str]) -> str:
    """The page with every marked table's body replaced by its rendering (a
    blank line on each side, so the Markdown around the markers stays apart).

    Raises:
        KeyError: a marker names a table ``rendered`` does not have.
    """

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in rendered:
            raise KeyError(f"the page shows table {name!r}, which {TABLE_LIST} lacks")
        return f"{match['open']}\n{rendered[name]}\n\n{match['close']}"

    return MARKED_TABLE.sub(body, text)


def stale_tables(committed: str, regenerated: str) -> list[str]:
    """The marked tables whose body differs between a page as committed and as
    :func:`regenerate` wrote it."""
    fresh = [match["body"] for match in MARKED_TABLE.finditer(regenerated)]
    return [
        match["name"]
        for match, body in zip(MARKED_TABLE.finditer(committed), fresh, strict=True)
        if match["body"] != body
    ]


def regenerate(
    pages: Mapping[str, str],
    tables: Mapping[str, TableSpec],
    payloads: Mapping[str, Mapping[str, Any]],
) -> dict[str, str]:
    """Each page with its marked tables rendered afresh (only the tables the
    pages show are rendered, so ``payloads`` needs only their sources).

    Raises:
        KeyError: a page shows a table ``tables`` lacks, or a table reads a
            source or path that is not there; the message names the table.
    """
    shown = {name for text in pages.values() for name in marked_tables(text)}
    unknown = sorted(shown - set(tables))
    if unknown:
        raise KeyError(f"the pages show tables {unknown}, which {TABLE_LIST} lacks")
    rendered = {name: render_table(tables[name], payloads) for name in sorted(shown)}
    return {page: rewrite_page(text, rendered) for page, text in pages.items()}


def page_diff(name: str, before: str, after: str) -> str:
    """A unified diff of a page against its regenerated form."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{name} (committed)",
            tofile=f"{name} (from the result JSONs)",
        )
    )


__all__ = [
    "MARKED_TABLE",
    "TABLE_LIST",
    "Column",
    "Provenance",
    "TableSpec",
    "cell_values",
    "lookup",
    "marked_tables",
    "page_diff",
    "provenance",
    "read_table_list",
    "regenerate",
    "render_table",
    "rewrite_page",
    "source_folders",
    "stale_tables",
]
