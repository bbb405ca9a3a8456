"""Run the documentation's code: every ```python and ```bash block of the site and the READMEs.

The blocks of ``docs/**/*.md``, ``README.md`` and ``packages/*/README.md`` are collected as test
items named ``PATH:LINE``. A block runs in a temporary directory that holds a link to the
repository's ``examples/`` (so ``core fit --config examples/digits/config.yaml`` and
``from examples.digits import ...`` work as they do from a checkout):

- a ``python`` block is executed in this process, in a namespace shared by the page's blocks of the
  same session, in order (the page reads top to bottom);
- a ``bash`` block runs with ``bash -euo pipefail``, with this interpreter's ``bin`` first on
  ``PATH`` (so ``core`` and ``python`` are the ones under test).

An HTML comment on the line before a block (blank lines allowed) says what it needs::

    <!-- docs: needs=gpu -->                   skipped unless torch sees a CUDA device
    <!-- docs: needs=mlflow -->                skipped unless the module ``mlflow`` imports
    <!-- docs: needs=multinode -->             several machines (or a launcher): skipped here
    <!-- docs: needs=multiprocess -->          a script DDP starts again per process: skipped in this process
    <!-- docs: needs=slurm -->                 a SLURM cluster: skipped here (tests/env_slurm has one)
    <!-- docs: needs=network -->               the internet: skipped here
    <!-- docs: skip="reason" -->               never run here, for that reason
    <!-- docs: xfail="reason" -->              a known failure (strict: a pass fails the test)
    <!-- docs: session=NAME -->                a namespace and directory of its own on the page
    <!-- docs: uses=digits -->                 ``model``, ``data`` (also ``datamodule``) and ``trainer``
                                               defined first, as the snippet assumes (see PRESETS)

Every namespace starts with ``import torchplug`` done, as a reader's session would have it. Keys
combine (``needs=gpu,mlflow session=mlflow``). A skipped block is reported with its reason.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "console": None}
MARKER_PREFIX = "<!-- docs:"
#: What a ``needs=`` value means when it is not the name of an importable module.
NEEDS_HERE = {
    "gpu": "needs a CUDA GPU",
    "multinode": "needs several machines or a launcher (torchrun, srun) starting the processes",
    "multiprocess": "starts a process per device by running its script again (tests/core/strategies run DDP so)",
    "slurm": "needs a SLURM cluster (tests/env_slurm runs a real one)",
    "network": "needs the internet",
}
BLOCK_TIMEOUT_S = 600

#: What ``uses=NAME`` defines before the block, for snippets that show a call on "your model and data".
#: The digits model stops its fit after a few steps, so that ``trainer.fit(model, ...)`` with the
#: Trainer's defaults (1000 epochs, as in Lightning) stays a test of seconds; the Tuner's own
#: searches (a fit with a finder callback) run as they would for the reader.
PRESETS = {
    "digits": """
import torchplug
from examples.digits import DigitsClassifier, DigitsDataModule

class _FewSteps(DigitsClassifier):
    def on_fit_start(self):
        super().on_fit_start()
        finding = any(type(c).__name__.endswith("Finder") for c in self.trainer.callbacks)  # the Tuner's searches
        if not finding and (self.trainer.fit_loop.max_steps == -1 or self.trainer.fit_loop.max_steps > 6):
            self.trainer.fit_loop.max_steps = 6

model = _FewSteps()
data = datamodule = DigitsDataModule()
trainer = torchplug.Trainer(max_epochs=1, enable_progress_bar=False)
""",
}


@dataclass
class Block:
    """One fenced code block of a markdown file, with the options of its ``docs:`` comment."""

    path: Path
    line: int
    language: str
    code: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def session(self) -> str:
        return f"{self.path}::{self.options.get('session', '')}"


def parse_options(comment: str) -> dict[str, str]:
    """``needs=gpu skip="why"`` → ``{"needs": "gpu", "skip": "why"}``."""
    body = comment.strip()[len(MARKER_PREFIX) :].removesuffix("-->")
    options = {}
    for item in shlex.split(body):
        key, sep, value = item.partition("=")
        if not sep or key not in ("needs", "skip", "xfail", "session", "uses"):
            raise ValueError(
                f"unknown docs option {item!r} in {comment.strip()!r}: use needs=, skip=, xfail=, session=, uses="
            )
        if key == "uses" and value not in PRESETS:
            raise ValueError(f"unknown preset uses={value!r} in {comment.strip()!r}; known: {', '.join(PRESETS)}")
        options[key] = value
    return options


def extract_blocks(path: Path) -> Iterator[Block]:
    """Yield the ``python`` and ``bash`` blocks of one markdown file, with their options."""
    lines = path.read_text().splitlines()
    pending: dict[str, str] | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith(MARKER_PREFIX):
            pending = parse_options(stripped)
        elif stripped.startswith("```"):
            indent = len(lines[i]) - len(lines[i].lstrip())
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            language = LANGUAGES.get(stripped[len(fence) :].strip().split(" ")[0])
            start, i = i, i + 1
            body = []
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i][indent:])
                i += 1
            if language:
                yield Block(path, start + 1, language, "\n".join(body) + "\n", pending or {})
            elif pending:
                raise ValueError(f"{path}:{start + 1}: a docs: comment before a block that is not python or bash")
            pending = None
        elif stripped and not stripped.startswith("<!--") and pending is not None:
            raise ValueError(f"{path}:{i + 1}: a docs: comment must come right before its code block")
        i += 1


def documentation_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md")), *sorted((ROOT / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def skip_reason(options: dict[str, str]) -> str | None:
    """Why a block cannot run here, or None."""
    if "skip" in options:
        return options["skip"]
    for need in filter(None, options.get("needs", "").split(",")):
        if need == "gpu":
            import torch

            if not torch.cuda.is_available():
                return NEEDS_HERE[need]
        elif need in NEEDS_HERE:
            return NEEDS_HERE[need]
        elif importlib.util.find_spec(need) is None:
            return f"needs the optional package that provides {need!r} (not installed here)"
    return None


class _Session:
    """The directory and namespace that the blocks of one page's session share."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="torchplug-docs-"))
        (self.tmp / "examples").symlink_to(ROOT / "examples")
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.prepared: set[str] = set()


_SESSIONS: dict[str, _Session] = {}


class DocBlockItem(pytest.Item):
    """A test item that runs one code block."""

    def __init__(self, *, block: Block, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block = block
        reason = skip_reason(block.options)
        if reason:
            self.add_marker(pytest.mark.skip(reason=reason))
        elif "xfail" in block.options:
            self.add_marker(pytest.mark.xfail(reason=block.options["xfail"], strict=True))
        if block.language == "bash":
            self.add_marker(pytest.mark.slow)

    def runtest(self) -> None:
        session = _SESSIONS.setdefault(self.block.session, _Session())
        if self.block.language == "python":
            self._run_python(session)
        else:
            self._run_bash(session)

    def _run_python(self, session: _Session) -> None:
        code = compile(self.block.code, f"{self.block.path}:{self.block.line}", "exec")
        cwd = os.getcwd()
        os.chdir(session.tmp)
        sys.path.insert(0, str(session.tmp))
        try:
            exec("import torchplug", session.namespace)
            preset = self.block.options.get("uses")
            if preset and preset not in session.prepared:
                exec(PRESETS[preset], session.namespace)
                session.prepared.add(preset)
            exec(code, session.namespace)
        finally:
            sys.path.remove(str(session.tmp))
            os.chdir(cwd)

    def _run_bash(self, session: _Session) -> None:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.block.code],
            cwd=session.tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise BlockFailed(
                f"exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        where = f"{self.block.path.relative_to(ROOT)}:{self.block.line} ({self.block.language})"
        if isinstance(excinfo.value, BlockFailed):
            return f"{where}\n{self.block.code}{excinfo.value}"
        return f"{where}\n{self.block.code}\n{super().repr_failure(excinfo, style)}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.block.path, self.block.line - 1, f"{self.block.path.relative_to(ROOT)}:{self.block.line}"


class BlockFailed(Exception):
    """A bash block exited with a non-zero status."""


class MarkdownFile(pytest.File):
    """The code blocks of one markdown file."""

    def collect(self) -> Iterator[DocBlockItem]:
        for block in extract_blocks(self.path):
            yield DocBlockItem.from_parent(self, name=f"line {block.line}", block=block)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    if module_path.name == "test_snippets.py":
        return SnippetsModule.from_parent(parent, path=module_path)
    return None


class SnippetsModule(pytest.Module):
    """``test_snippets.py``: its own tests, and one ``MarkdownFile`` per documentation file."""

    def collect(self) -> Iterator[Any]:
        yield from super().collect()
        for path in documentation_files():
            yield MarkdownFile.from_parent(self, path=path, nodeid=str(path.relative_to(ROOT)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    import shutil

    for entry in _SESSIONS.values():
        shutil.rmtree(entry.tmp, ignore_errors=True)
