"""Hooks of every test run, unit and integration: SIGTERM ends the run as Ctrl-C does
(:mod:`tests.interrupt`), so the fixtures tear down what they started; a crash's Python
stacks go where ``scripts/pytest-or-crash`` prints them (:mod:`tests.crash_report`)."""

pytest_plugins = ["tests.interrupt", "tests.crash_report"]
