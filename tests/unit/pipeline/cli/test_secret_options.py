"""No secret on the command line: ``ps`` shows every process's arguments to every user
of the host. Every option of every ``floodgate`` command (the services' included) is
listed; one whose name says it carries a secret must take a file, or be refused. The
refusals themselves run as a user would run them, in a process of their own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from pipeline.cli import app

FLOODGATE = [sys.executable, "-m", "pipeline.cli"]

#: Option and variable names that say a secret.
SECRET = re.compile(r"pass(word)?|token|secret|credential|key|sasl|auth", re.IGNORECASE)

#: Options named like a secret that take none, and what they take instead.
NOT_A_SECRET = {
    "--sasl-user": "a user's NAME; NAME:PASSWORD is refused (tested below)",
}

#: Options refused whatever their value (tested below).
REFUSED = {"--token"}


def commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command under ``command`` (typer's own click types: walked by their
    ``commands``), with its path."""
    children = getattr(command, "commands", None)
    if not children:
        yield path, command
        return
    for name, child in children.items():
        yield from commands(child, (*path, name))


def every_option() -> list[tuple[str, str, Any]]:
    root = typer.main.get_command(app)
    return [
        (" ".join(path), name, param)
        for path, command in commands(root, ("floodgate",))
        for param in command.params
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    ]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOODGATE, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def test_no_option_takes_a_secret_as_its_value() -> None:
    """``floodgate broker --sasl-user NAME:PASSWORD`` took the
    password in argv."""
    options = every_option()
    assert any(command == "floodgate admission submit" for command, _, _ in options)
    assert any(command == "floodgate sweeper serve" for command, _, _ in options)
    offending = [
        f"{command} {name}"
        for command, name, param in options
        if SECRET.search(name)
        and not name.endswith("-file")
        and name not in NOT_A_SECRET
        and name not in REFUSED
        and not param.is_flag
    ]
    assert offending == [], "take a secret from a file or the environment, never argv"


def test_a_sasl_user_with_a_password_is_refused_without_showing_it() -> None:
    """the old ``NAME:PASSWORD`` form is refused, before any broker
    starts, naming the two ways that keep the password off argv."""
    ran = run("broker", "--sasl-user", "alice:Pa55-w0rd-in-argv")
    assert ran.returncode == 2, ran.stderr
    assert "--sasl-user takes a NAME only" in ran.stderr and "shown by ps" in ran.stderr
    assert "--sasl-password-file" in ran.stderr and "FLOODGATE_SASL_PASSWORD" in ran.stderr
    assert "Pa55-w0rd-in-argv" not in ran.stdout + ran.stderr
    assert "FLOODGATE_KAFKA_BOOTSTRAP=" not in ran.stdout


def test_sasl_passwords_come_from_a_private_file_or_the_environment(tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    passwords.write_text("alice:Pa55-w0rd-of-alice\nbob:Pa55-w0rd-of-bob\n")
    passwords.chmod(0o644)
    ran = run("broker", "--sasl-user", "alice", "--sasl-password-file", str(passwords))
    assert ran.returncode == 2, ran.stderr
    assert f"--sasl-password-file {passwords}" in ran.stderr and "mode 0644" in ran.stderr
    assert "Pa55" not in ran.stdout + ran.stderr

    passwords.chmod(0o600)
    ran = run("broker", "--sasl-user", "carol", "--sasl-password-file", str(passwords))
    assert ran.returncode == 2 and "--sasl-user carol: no password" in ran.stderr
    # Read, then refused for the engine only (noida-db has no SASL): no broker starts.
    for args, env in (
        (["--sasl-user", "alice", "--sasl-password-file", str(passwords)], {}),
        (["--sasl-user", "alice"], {"FLOODGATE_SASL_PASSWORD": "Pa55-w0rd-of-alice"}),
    ):
        ran = run("broker", "--engine", "noida-db", *args, env=env)
        assert ran.returncode == 2, ran.stderr
        assert "needs --engine apache-kafka" in ran.stderr
        assert "Pa55" not in ran.stdout + ran.stderr


def test_the_token_option_is_refused_on_every_command_that_has_it() -> None:
    refused = sorted({command for command, name, _ in every_option() if name in REFUSED})
    assert refused
    arguments = {"start-now": ["1"], "cancel": ["1"], "reschedule": ["1"], "enable-lane": ["l"]}
    for command in refused:
        *group, name = command.split()[1:]
        ran = run(
            *group,
            name,
            *arguments.get(name, []),
            "--token",
            "s3cret-in-argv",
            "--url",
            "http://127.0.0.1:1",
            *(["--", "true"] if name == "submit" else []),
        )
        assert ran.returncode == 2, (command, ran.stderr)
        assert "--token is refused" in ran.stderr
        assert "s3cret-in-argv" not in ran.stdout + ran.stderr


def test_a_token_file_group_or_others_may_read_is_refused_with_path_and_mode(
    tmp_path: Path,
) -> None:
    """a 0644 ``--token-file`` was read without a word."""
    token_file = tmp_path / "token"
    token_file.write_text("0f3c9a6e1b7d4c28a5e9f0b3d6c1a7e4\n")
    token_file.chmod(0o644)
    ran = run(
        "admission", "cancel", "1", "--token-file", str(token_file), "--url", "http://127.0.0.1:1"
    )
    assert ran.returncode == 1, ran.stderr
    assert f"--token-file {token_file}" in ran.stderr and "(mode 0644)" in ran.stderr
    assert "chmod 600" in ran.stderr
    assert "0f3c9a6e" not in ran.stdout + ran.stderr
    assert "admission service at" not in ran.stderr  # refused before any call
