"""Hooks of every test run, unit and integration: SIGTERM ends the run as Ctrl-C does
(:mod:`tests.interrupt`), so the fixtures tear down what they started."""

from tests.interrupt import pytest_configure

__all__ = ["pytest_configure"]
