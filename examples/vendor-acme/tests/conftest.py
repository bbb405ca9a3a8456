"""The conformance suite's summary table at the end of each run."""

pytest_plugins = ["torchplug.testing.pytest_plugin"]
