"""The collector of documentation blocks (``conftest.py``): what it finds, and how it reads markers.

The blocks themselves are collected beside these tests, one item per block (``README.md::line 12``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.conftest import ROOT, documentation_files, extract_blocks, parse_options, skip_reason


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_blocks_are_found_with_their_language_line_and_options(tmp_path: Path) -> None:
    page = write(
        tmp_path,
        "# Page\n\n```python\nx = 1\n```\n\n<!-- docs: needs=gpu session=a -->\n\n```bash\ncore env\n```\n"
        "```yaml\nkey: 1\n```\n",
    )
    blocks = list(extract_blocks(page))
    assert [(b.language, b.line, b.code, b.options) for b in blocks] == [
        ("python", 3, "x = 1\n", {}),
        ("bash", 9, "core env\n", {"needs": "gpu", "session": "a"}),
    ]


def test_an_indented_block_in_a_list_is_dedented(tmp_path: Path) -> None:
    page = write(tmp_path, "- item\n\n    ```python\n    if True:\n        y = 2\n    ```\n")
    assert [b.code for b in extract_blocks(page)] == ["if True:\n    y = 2\n"]


def test_a_marker_separated_from_its_block_by_text_is_an_error(tmp_path: Path) -> None:
    page = write(tmp_path, '<!-- docs: skip="why" -->\nSome text.\n```bash\ncore env\n```\n')
    with pytest.raises(ValueError, match="right before its code block"):
        list(extract_blocks(page))


def test_an_unknown_option_is_refused_with_the_ones_allowed() -> None:
    with pytest.raises(ValueError, match=r"unknown docs option .need=gpu.*needs=, skip=, xfail=, session="):
        parse_options("<!-- docs: need=gpu -->")


def test_a_quoted_reason_keeps_its_spaces() -> None:
    assert parse_options('<!-- docs: skip="runs for an hour" -->') == {"skip": "runs for an hour"}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, None),
        ({"skip": "why"}, "why"),
        ({"needs": "slurm"}, "needs a SLURM cluster (tests/env_slurm runs a real one)"),
        ({"needs": "pytest"}, None),
        (
            {"needs": "no_such_module_here"},
            "needs the optional package that provides 'no_such_module_here' (not installed here)",
        ),
    ],
    ids=["nothing", "skip", "slurm", "installed-module", "missing-module"],
)
def test_skip_reasons(options: dict[str, str], expected: str | None) -> None:
    assert skip_reason(options) == expected


def test_every_readme_and_page_is_read() -> None:
    files = {str(p.relative_to(ROOT)) for p in documentation_files()}
    assert {"README.md", "packages/core/README.md", "docs/index.md", "docs/get-started/quick-start.md"} <= files
    assert len([f for f in files if f.startswith("packages/")]) == len(list(ROOT.glob("packages/*/README.md")))
