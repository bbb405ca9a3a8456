"""Launchers: how multi-process strategies start their processes."""
