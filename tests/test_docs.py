"""The README and the docs site: short, buildable, and their code is real code."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from earm_jax.jobs.results_tables import MARKED_TABLE

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(path: Path, language: str) -> list[str]:
    return [
        code
        for lang, code in FENCE.findall(path.read_text(encoding="utf-8"))
        if lang == language
    ]


def _readme_python() -> list[str]:
    return _blocks(README, "python")


def test_readme_fits_two_screens_and_keeps_the_two_commands_first():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    first = _blocks(README, "bash")[0].splitlines()
    assert first[0].startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert first[0].endswith(".venv/bin/earm simulate")
    test_command = "scripts/test"
    assert first[1] == test_command
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci, "CI must run exactly the README's test command"
    script = (REPO / test_command).read_text(encoding="utf-8")
    assert "EARM_REQUIRE_VLLM" in script and "EARM_REQUIRE_EXTRAS" in script
    assert "-m pytest -n 2 --dist loadgroup" in script


def test_readme_has_no_lab_log():
    # A generated table names the commit its result JSON recorded: provenance,
    # not a lab log (tests/cli/test_results_tables.py checks those blocks).
    text = MARKED_TABLE.sub("", README.read_text(encoding="utf-8"))
    assert not re.search(r"\bissue \d+\b", text, re.I)
    assert "DESIGN" not in text
    assert "this round" not in text
    # No commit hashes: 7+ hex characters with a digit and a letter.
    for word in re.findall(r"\b[0-9a-f]{7,40}\b", text):
        assert not (re.search(r"\d", word) and re.search(r"[a-f]", word)), word


@pytest.mark.parametrize(
    "path", [README, *PAGES], ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_every_python_block_is_valid_python(path):
    for number, code in enumerate(_blocks(path, "python")):
        ast.parse(code, filename=f"{path.name} python block {number}")


def test_nothing_cites_the_design_note_that_does_not_ship():
    roots = ["earm_jax", "tests", "notebooks", "docs", "benchmarks", "experiments"]
    found = [
        f"{path.relative_to(REPO)}"
        for root in roots
        for path in (REPO / root).rglob("*")
        if path.suffix in {".py", ".md"}
        and path.name != "test_docs.py"
        and "DESIGN §" in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_no_library_module_names_a_commit():
    # History (which commit did what) belongs in docs/design-notes.md; a series
    # or a comment in the library says what a thing is instead.
    allowed = {"ba7816bf8f01cfea"}  # the SHA-256 of "abc", a hashing doctest
    for path in (REPO / "earm_jax").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        hexes = re.findall(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])", text)
        for word in set(hexes) - allowed:  # also inside a name, e.g. step_1a2b3c4
            commit = re.search(r"\d", word) and re.search(r"[a-f]", word)
            assert not commit, f"{path.relative_to(REPO)} names {word}"


def test_no_library_module_names_a_lab_result_file():
    results = {p.name for p in (REPO / "benchmarks" / "results").glob("*.json")}
    results |= {p.name for p in (REPO / "experiments" / "results").glob("*.json")}
    results -= {"figures.json", "tables.json"}  # what `earm plots`/`results` read
    for path in (REPO / "earm_jax").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named = sorted(name for name in results if name in text)
        assert not named, f"{path.relative_to(REPO)} names {named}"


@pytest.mark.slow
def test_readme_retriever_snippet_runs_with_a_custom_scorer_and_embedder(tmp_path):
    code = _readme_python()[1]
    assert "class KeywordScorer" in code and "class WordHashEmbedder" in code
    namespace: dict = {}
    exec(compile(code, "README retriever example", "exec"), namespace)
    ids, calls = namespace["demo"](tmp_path / "agent")
    # The only memory the scorer says yes to comes first, for a few paid
    # calls rather than all 31.
    assert ids[0] == 0 and len(ids) == 2
    assert 0 < calls < 31


@pytest.mark.slow
def test_mkdocs_build_is_strict_and_clean(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert not re.search(r"WARNING\s+-", output), output[-4000:]
    assert (tmp_path / "index.html").exists()
    api = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    # The docstrings' reST roles render (docs/_hooks/rest_roles.py), never as text.
    assert not re.findall(r":(?:func|class|mod|meth|attr|data|exc|obj|math):", api)
    assert 'href="#earm_jax.SolverConfig"><code>SolverConfig</code></a>' in api


def test_rest_roles_become_code_and_optional_cross_references():
    import griffe

    spec = importlib.util.spec_from_file_location(
        "rest_roles", REPO / "docs" / "_hooks" / "rest_roles.py"
    )
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    package = griffe.load("earm_jax", search_paths=[str(REPO)])
    owner = package["settings"]
    text = roles.rewrite(
        "See :class:`~earm_jax.base.Policy`, :func:`paper_policy`, "
        ":math:`\\lambda` and :ref:`x`.",
        owner,
    )
    wrapped = roles.rewrite(
        ":class:`~earm_jax.base.\n    Policy` :math:`a +\n b`", owner
    )
    assert wrapped == (
        '<autoref identifier="earm_jax.base.Policy" optional>'
        "<code>Policy</code></autoref> `a + b`"
    )
    assert text == (
        'See <autoref identifier="earm_jax.base.Policy" optional>'
        "<code>Policy</code></autoref>, "
        '<autoref identifier="earm_jax.policies.paper_policy" optional>'
        "<code>paper_policy</code></autoref>, `λ` and `x`."
    )


def test_long_code_lines_wrap_in_their_column():
    # A snippet line longer than the text column wraps (docs/stylesheets)
    # rather than running past it; the retriever page's snippet fits anyway.
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "stylesheets/extra.css" in config and "pygments_lang_class: true" in config
    css = (REPO / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert ".language-python pre > code" in css and "pre-wrap" in css
    for code in _blocks(REPO / "docs" / "retriever.md", "python"):
        assert max(len(line) for line in code.splitlines()) <= 80, code


def test_the_scripts_and_modules_the_pages_name_exist():
    # design-notes.md tells what moved where, so it may name a path that moved.
    named = re.compile(
        r"\b(?:benchmarks|experiments|examples|scripts|earm_jax|tests)/[\w./-]*\.py\b"
    )
    pages = [README, REPO / "CONTRIBUTING.md", *PAGES]
    missing = [
        f"{page.relative_to(REPO)}: {path}"
        for page in pages
        if page.name != "design-notes.md"
        for path in sorted(set(named.findall(page.read_text(encoding="utf-8"))))
        if not (REPO / path).exists()
    ]
    assert missing == []
