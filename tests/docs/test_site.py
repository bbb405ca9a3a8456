"""The built documentation site: every public name in the reference, and the pages in a real browser.

``tox -e docs`` builds the site (``mkdocs build --strict``) and gives its folder in
``TORCHPLUG_DOCS_SITE_DIR``; without it, these tests build the site themselves. The browser is
Debian's ``chromium``, headless: a missing browser skips the browser tests, unless
``TORCHPLUG_REQUIRE_BROWSER=1`` (set by ``tox -e docs``) makes it a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.conftest import ROOT

sys.path.insert(0, str(ROOT / "docs" / "tools"))
from hooks import public_names

pytestmark = pytest.mark.slow

#: Every module whose ``__all__`` is public API, and where its names are documented.
PUBLIC_MODULES = [
    "torchplug",
    "torchplug.accelerators",
    "torchplug.callbacks",
    "torchplug.cli",
    "torchplug.environments",
    "torchplug.io",
    "torchplug.loggers",
    "torchplug.precision",
    "torchplug.profilers",
    "torchplug.strategies",
    "torchplug.testing",
    "torchplug.tuner",
    "torchplug.utilities",
    "torchplug_cuda",
    "torchplug_tpu",
    "torchplug_ipu",
    "torchplug_hpu",
    "torchplug_mps",
    "torchplug_slurm",
    "torchplug_xla_io",
    "torchplug_deepspeed",
    "torchplug_horovod",
    "torchplug_mlflow",
    "torchplug_wandb",
]
#: Public names that are not objects in the source (made on first attribute access), documented in prose.
PROSE_ONLY = {
    "AcceleratorRegistry",
    "StrategyRegistry",
    "PrecisionRegistry",
    "CheckpointIORegistry",
    "ClusterEnvironmentRegistry",
}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=5000",
]


@pytest.fixture(scope="module")
def site() -> Path:
    """The built site: the one ``tox -e docs`` built, or one built now."""
    given = os.environ.get("TORCHPLUG_DOCS_SITE_DIR")
    if given:
        path = Path(given)
        assert (path / "index.html").is_file(), f"TORCHPLUG_DOCS_SITE_DIR={given} holds no built site"
        return path
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"torchplug-site-{os.getpid()}"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(path)], cwd=ROOT, check=True
    )
    return path


def reference_html(site: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((site / "reference").rglob("index.html")))


def test_every_public_name_has_its_reference_entry(site: Path) -> None:
    """Each object is documented once, under one of its public paths (``torchplug.Strategy`` is also
    ``torchplug.strategies.Strategy``): its entry's id is the module that defines it."""
    html = reference_html(site)
    missing = [
        f"{module}.{name} (id {defined_in}.{name})"
        for module in PUBLIC_MODULES
        for name, defined_in in public_names(module).items()
        if name not in PROSE_ONLY and f'id="{defined_in}.{name}"' not in html
    ]
    assert not missing, f"not in the API reference: {', '.join(missing)}"


def test_the_names_made_on_first_use_are_described(site: Path) -> None:
    plugins_page = (site / "reference" / "api" / "plugins" / "index.html").read_text()
    assert all(name in plugins_page for name in PROSE_ONLY)


def test_the_generated_references_hold_every_subcommand_and_variable(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in (
        "core fit",
        "core validate",
        "core plugins list",
        "core plugins verify",
        "core plugins new",
        "core checkpoint consolidate",
        "core env",
    ):
        assert f"<code>{command}</code>" in cli, command
    assert "--trainer.max_epochs" in cli
    env_vars = (site / "reference" / "env-vars" / "index.html").read_text()
    for name in ("TORCHPLUG_PREFER", "TORCHPLUG_PLUGIN_TIMEOUT", "TORCHPLUG_SLURM_REQUEUE_SIGNAL"):
        assert f"<code>{name}</code>" in env_vars, name


def test_the_charts_are_drawn_with_their_host_and_date(site: Path) -> None:
    page = (site / "explanation" / "performance" / "index.html").read_text()
    for name in ("step_overhead", "checkpoint_save", "startup"):
        png = site / "explanation" / "charts" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"charts/{name}.png" in page
        doc = json.loads((ROOT / "docs" / "benchmarks" / f"{name}.json").read_text())
        assert doc["date"] in page and doc["host"]["torch"] in page


# --- in the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium is not installed (tools/install-system-deps installs Debian's package)"
        if os.environ.get("TORCHPLUG_REQUIRE_BROWSER") == "1":
            pytest.fail(message + "; TORCHPLUG_REQUIRE_BROWSER=1 requires it")
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1 (search and the reference pages need a server, not file://)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def browse(chromium: str, tmp_path: Path, url: str, *extra: str) -> str:
    """The DOM of ``url`` after Chromium ran its scripts."""
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *extra, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"chromium exited {done.returncode} on {url}: {done.stderr[-2000:]}"
    return done.stdout


def test_the_home_page_has_the_navigation_and_ran_its_scripts(chromium: str, served: str, tmp_path: Path) -> None:
    screenshot = tmp_path / "home.png"
    dom = browse(chromium, tmp_path, served + "/", f"--screenshot={screenshot}", "--window-size=1280,1000")
    for section in ("Get started", "Guides", "For vendors", "Reference", "Explanation"):
        assert section in dom, section
    assert 'href="reference/api/trainer/"' in dom
    # Added by the theme's JavaScript: the page's scripts ran (the focus polyfill, the copy buttons).
    assert "js-focus-visible" in dom
    assert "md-code__button" in dom
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_trainer_reference_page_documents_the_trainer(chromium: str, served: str, tmp_path: Path) -> None:
    dom = browse(chromium, tmp_path, served + "/reference/api/trainer/")
    assert 'id="torchplug.Trainer"' in dom
    for member in ("fit", "validate", "test", "predict"):
        assert f'id="torchplug.trainer.trainer.Trainer.{member}"' in dom or f"Trainer.{member}" in dom, member


def test_the_search_index_is_served(chromium: str, served: str, tmp_path: Path) -> None:
    dom = browse(chromium, tmp_path, served + "/search/search_index.json")
    assert '"docs"' in dom and "Choosing backends" in dom and "torchplug.Trainer" in dom
