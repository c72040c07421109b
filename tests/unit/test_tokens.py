"""Development tokens: what `serve` and `mcp` accept, and what they refuse (without quoting the token)."""

from __future__ import annotations

import os
import stat
import uuid
from datetime import UTC, datetime, timedelta

import jwt
import pytest
from user_memory.errors import InvalidUserId, Unauthenticated
from user_memory_local import cli
from user_memory_local.tokens import (
    DEV_AUDIENCE,
    DEV_ISSUER,
    SECRET_ENV,
    issue_token,
    token_scopes,
    token_secret,
    verify_token,
)

SECRET = "unit-test-secret-0123456789abcdefghijklmnop"
OTHER = "another-secret-0123456789abcdefghijklmnopqr"
NOW = datetime(2026, 11, 23, 10, tzinfo=UTC)
USER = uuid.UUID("6f1c2a4e-3b5d-4c7e-9f80-1a2b3c4d5e6f")


def forged(claims: dict, secret: str = SECRET) -> str:
    base = {"iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "iat": int(NOW.timestamp()), "exp": int(NOW.timestamp()) + 60}
    return jwt.encode({**base, **claims}, secret, algorithm="HS256")


def refused(token: str, *fragments: str, secret: str = SECRET, now: datetime = NOW) -> str:
    with pytest.raises(Unauthenticated) as info:
        verify_token(token, secret=secret, now=now)
    message = str(info.value)
    assert (not token.strip() or token not in message) and "\n" not in message
    for part in token.split("."):  # not even a piece of it
        assert len(part) < 8 or part not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_round_trip_carries_the_user_issuer_audience_and_times():
    token = issue_token(USER, secret=SECRET, now=NOW, ttl_seconds=600)
    claims = verify_token(token, secret=SECRET, now=NOW + timedelta(seconds=599))
    assert claims["sub"] == str(USER)
    assert (claims["iss"], claims["aud"]) == (DEV_ISSUER, DEV_AUDIENCE)
    assert claims["exp"] - claims["iat"] == 600
    assert "scope" not in claims and token_scopes(claims) == frozenset()


def test_scopes_are_one_space_separated_claim():
    token = issue_token(str(USER), secret=SECRET, scopes=["user-memory/operator", "extra"], now=NOW)
    claims = verify_token(token, secret=SECRET, now=NOW)
    assert claims["scope"] == "user-memory/operator extra"
    assert token_scopes(claims) == {"user-memory/operator", "extra"}


def test_the_default_lifetime_is_twelve_hours():
    claims = verify_token(issue_token(USER, secret=SECRET, now=NOW), secret=SECRET, now=NOW)
    assert claims["exp"] - claims["iat"] == 12 * 3600


def test_an_expired_token_is_refused():
    token = issue_token(USER, secret=SECRET, now=NOW, ttl_seconds=60)
    refused(token, "expired", now=NOW + timedelta(seconds=60))


def test_a_token_signed_with_another_secret_is_refused():
    refused(issue_token(USER, secret=OTHER, now=NOW), "signature")


def test_a_token_for_another_audience_is_refused():
    refused(forged({"sub": str(USER), "aud": "someone-else"}), "audience")


def test_a_token_from_another_issuer_is_refused():
    refused(forged({"sub": str(USER), "iss": "somebody"}), "issued")


def test_a_token_without_a_subject_is_refused():
    refused(forged({}), "no subject")


def test_a_subject_that_is_not_a_uuid_is_refused_without_quoting_it():
    message = refused(forged({"sub": "robert'); DROP TABLE users;--"}), "not a user id")
    assert "DROP" not in message


@pytest.mark.parametrize("token", ["", "   ", "not-a-jwt", "a.b.c"])
def test_garbage_is_refused(token):
    refused(token)


def test_a_token_without_expiry_is_refused():
    token = jwt.encode({"sub": str(USER), "iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "iat": 1}, SECRET, algorithm="HS256")
    refused(token, "'exp'")


def test_a_token_issued_in_the_future_is_refused():
    token = issue_token(USER, secret=SECRET, now=NOW + timedelta(hours=1))
    refused(token, "not valid yet")


def test_an_unsigned_token_is_refused():
    token = jwt.encode({"sub": str(USER), "iss": DEV_ISSUER, "aud": DEV_AUDIENCE, "iat": 1, "exp": 2**40}, None, "none")
    refused(token)


def test_issuing_for_a_non_uuid_user_fails():
    with pytest.raises(InvalidUserId):
        issue_token("alice", secret=SECRET)


def test_the_secret_comes_from_the_environment_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, OTHER)
    assert token_secret(tmp_path) == OTHER
    assert not (tmp_path / "dev-token-secret").exists()


def test_the_secret_file_is_created_once_private(tmp_path, monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    home = tmp_path / "home"
    first = token_secret(home)
    path = home / "dev-token-secret"
    assert len(first) >= 40 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert token_secret(home) == first
    assert [p.name for p in home.iterdir()] == ["dev-token-secret"]  # no temporary file left behind


def test_the_token_command_prints_a_token_the_secret_verifies(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("USER_MEMORY_HOME", str(tmp_path))
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.delenv("OPERATOR_SCOPE", raising=False)
    assert cli.main(["token", str(USER), "--ttl", "120"]) == 0
    token = capsys.readouterr().out.strip()
    claims = verify_token(token, secret=token_secret(tmp_path))
    assert claims["sub"] == str(USER) and claims["exp"] - claims["iat"] == 120 and "scope" not in claims

    monkeypatch.setenv("OPERATOR_SCOPE", "ops/admin")
    assert cli.main(["token", str(USER), "--operator"]) == 0
    claims = verify_token(capsys.readouterr().out.strip(), secret=token_secret(tmp_path))
    assert claims["scope"] == "ops/admin"


@pytest.mark.parametrize("argv", [["token", "alice"], ["token", str(USER), "--ttl", "0"]])
def test_the_token_command_refuses_bad_input_on_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("USER_MEMORY_HOME", str(tmp_path))
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
