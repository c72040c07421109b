"""The documentation stays true to the repository: links resolve, every route has its curl in
docs/api.md, every setting and template parameter is in docs/configuration.md, the README's two
commands are what CI runs, and its layout is the architecture's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings
from user_memory import config

from tests.doc_pages import code_blocks, shell_commands
from tests.infrastructure.cfn import load

pytestmark = pytest.mark.infrastructure

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
OPENAPI = ROOT / "layers/core/user_memory/http/openapi.json"
README_MAX_LINES = 300

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def prose(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path) if re.match(r"#{1,6} ", line)}


def links(path: Path) -> list[str]:
    found = []
    for line in prose(path):
        line = re.sub(r"`[^`]*`", "", line)  # a link inside code is not a link
        found += [a or b for a, b in _LINK.findall(line)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    # Given every link of a page that stays in the repository
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        # Then the file is there, and so is the heading the anchor names
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert broken == [], broken


def test_the_link_checker_can_fail(tmp_path):
    # Given a page with a missing file and a missing anchor beside a good one
    (tmp_path / "a.md").write_text("# Title\n\n## A `code` heading: yes\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#a-code-heading-yes) [gone](nothere.md) [bad](a.md#nope)\n```\n[in code](x.md)\n```\n")
    # Then the checker sees exactly the two broken ones
    assert links(page) == ["a.md#a-code-heading-yes", "nothere.md", "a.md#nope"]
    assert "a-code-heading-yes" in anchors(tmp_path / "a.md") and "nope" not in anchors(tmp_path / "a.md")


# -- docs/api.md: a curl for every route ------------------------------------------------------------


def curl_commands(path: Path) -> list[str]:
    """Every curl command of the page's sh blocks."""
    return [c for block in code_blocks(path, "sh") for c in shell_commands(block) if c.startswith("curl ")]


def method_and_path(command: str) -> tuple[str, str]:
    method = re.search(r"-X\s+([A-Z]+)", command)
    path = re.search(r"\$API(/[^\s\"'?]*)", command)
    assert path, command
    return (method.group(1) if method else "GET"), path.group(1)


def test_every_operation_of_the_openapi_document_has_a_curl_in_docs_api_md():
    # Given every operation of the committed OpenAPI document
    document = json.loads(OPENAPI.read_text())
    operations = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    # When the curl commands of docs/api.md are matched against their path templates
    called = [method_and_path(c) for c in curl_commands(ROOT / "docs/api.md")]
    covered = set()
    for method, template in operations:
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")
        if any(m == method and pattern.match(p) for m, p in called):
            covered.add((method, template))
    # Then every one of them is shown
    assert sorted(operations - covered) == []


# -- docs/configuration.md: every setting and every template parameter ---------------------------------


def settings_variables() -> set[str]:
    classes = [c for c in vars(config).values() if isinstance(c, type) and issubclass(c, BaseSettings)]
    return {name.upper() for c in classes if c.__module__ == config.__name__ for name in c.model_fields}


def test_every_setting_and_template_parameter_is_in_docs_configuration_md():
    text = (ROOT / "docs/configuration.md").read_text()
    variables = settings_variables()
    parameters = set(load("template.yaml")["Parameters"])
    assert len(variables) > 30 and len(parameters) > 30  # the lists are read, not empty
    assert sorted(v for v in variables if f"`{v}`" not in text) == []
    assert sorted(p for p in parameters if f"`{p}`" not in text) == []


# -- the README --------------------------------------------------------------------------------------


def test_the_readme_is_short_with_contents_and_its_two_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "## Contents" in readme
    two = code_blocks(ROOT / "README.md", "sh")[0]
    assert re.search(r"^make demo\b", two, re.M) and re.search(r"^make test\b", two, re.M)
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines() if not line.startswith("#")]
    assert "make test" in ci


def layout_entries(path: Path, heading: str) -> list[str]:
    """The first column of the layout picture under `heading`: the top-level folders and files."""
    text = path.read_text()
    block = text[text.index(heading) :].split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines() if line and not line.startswith(" ")]


def test_the_readmes_layout_is_the_architectures():
    readme = layout_entries(ROOT / "README.md", "## Layout")
    architecture = layout_entries(ROOT / "docs/architecture.md", "## Layout")
    assert sorted(readme) == sorted(architecture)
