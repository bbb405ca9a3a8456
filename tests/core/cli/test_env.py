"""``core env``: the report to paste into bug reports, as text and as JSON."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re

import pytest
import torch

from tests.core.cli.conftest import Core
from torchplug.cli import main

#: Variables that make a cluster environment detect itself; each test starts without them.
CLUSTER_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "LSB_JOBID",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "KUBERNETES_SERVICE_HOST",
    "TORCHPLUG_CLUSTER_ENVIRONMENT",
)


@pytest.fixture(autouse=True)
def _not_on_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def env_json(core: Core) -> dict[str, object]:
    result = core("env", "--json")
    assert result.code == 0, result
    data = json.loads(result.out)
    assert isinstance(data, dict)
    return data


def test_env_json_gives_the_versions(core: Core) -> None:
    versions = env_json(core)["versions"]
    assert isinstance(versions, dict)
    assert versions["python"] == platform.python_version()
    assert versions["torch"]["version"] == torch.__version__
    assert versions["core"] == importlib.metadata.version("core")


def test_env_json_lists_each_plugin_distribution_with_its_version_and_state(core: Core) -> None:
    plugins = env_json(core)["plugins"]
    assert isinstance(plugins, list)
    builtin = next(p for p in plugins if p["builtin"])
    assert (builtin["distribution"], builtin["state"]) == ("core", "ok")
    for plugin in plugins:
        if plugin["distribution"]:
            assert plugin["version"] == importlib.metadata.version(plugin["distribution"])


def test_env_json_gives_the_usable_devices(core: Core) -> None:
    devices = {d["accelerator"]: d for d in env_json(core)["devices"]}  # type: ignore[attr-defined]
    assert devices["cpu"]["available"] is True
    assert devices["cpu"]["device_count"] >= 1


def test_env_json_gives_the_detected_cluster_environment(core: Core, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = env_json(core)["cluster_environment"]
    assert cluster["name"] == "local"  # type: ignore[index]
    assert "local: detected" in cluster["trace"]  # type: ignore[index]
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    assert env_json(core)["cluster_environment"]["name"] == "torchelastic"  # type: ignore[index]


def test_env_text_has_a_section_for_each_part(core: Core) -> None:
    result = core("env")
    assert result.code == 0, result
    for title in ("Versions", "Plugins", "Devices", "Registered names", "Cluster environment", "Settings"):
        assert f"\n{title}\n" in result.out
    assert re.search(rf"^  torch +{re.escape(torch.__version__)} ", result.out, re.MULTILINE)
    assert "TORCHPLUG_STRICT_PLUGINS=1" in result.out  # set by tests/conftest.py


def test_env_help_documents_the_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["env", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in ("--json", "schema_version", "cluster_environment", "exit codes:"):
        assert text in out
