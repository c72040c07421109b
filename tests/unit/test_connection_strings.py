"""A connection string the driver cannot parse is a configuration error that never quotes it: libpq's
own reason names the token it could not read, which can be the password."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict
from user_memory.adapters.postgres import checked_conninfo, login_conninfo, open_pool
from user_memory.errors import ConfigError

# Passwords as generators make them: long enough that a match is never a coincidence.
passwords = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~", min_size=12, max_size=40
)

# Ways a connection string around a password goes wrong: a percent sign that starts no escape, one
# that decodes to no UTF-8, a key=value string with a word and no value, an unterminated quote.
MALFORMED = [
    "postgresql://memory_api:{pw}%zz@proxy.internal:5432/user_memory",
    "postgresql://memory_api:{pw}%ff@proxy.internal:5432/user_memory",
    "postgresql://memory_api:{pw}%4@proxy.internal/user_memory?sslmode=require",
    "host=proxy.internal user=memory_api password={pw} port",
    "host=proxy.internal password='{pw}",
    "postgresql://memory_api@proxy.internal/user_memory?password={pw}%g0",
]


@given(password=passwords, shape=st.sampled_from(MALFORMED))
def test_a_malformed_connection_string_is_refused_without_quoting_its_password(password: str, shape: str) -> None:
    # Given a connection string holding a password that libpq cannot parse
    dsn = shape.format(pw=password)
    # When it is checked
    with pytest.raises(ConfigError) as caught:
        checked_conninfo(dsn)
    # Then the error says what is wrong in one line, and nothing of the string is in it or its chain
    message = str(caught.value)
    assert "not a PostgreSQL connection string" in message and "\n" not in message
    assert password not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@given(password=passwords)
def test_a_pool_on_a_malformed_connection_string_fails_without_quoting_it(password: str) -> None:
    # Given a function's configured URL with a bad percent-encoding in its password
    dsn = f"postgresql://memory_api:{password}%zz@proxy.internal:5432/user_memory"
    # When its pool is opened
    with pytest.raises(ConfigError) as caught:
        open_pool(dsn, timeout=0.1)
    # Then the configuration error carries no part of the password
    assert password not in str(caught.value)


# Whatever a login's secret holds (the stack generates alphanumeric passwords; a person may not).
secret_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=60)


@given(username=secret_text, password=secret_text)
def test_a_logins_connection_string_carries_its_user_and_password_exactly(username: str, password: str) -> None:
    # Given the proxy's endpoint and a login's credentials, any characters (quotes, spaces, @, %, =)
    endpoint = "postgresql://proxy.internal:5432/user_memory?sslmode=require"
    # When the connection string is built
    parsed = conninfo_to_dict(login_conninfo(endpoint, username, password))
    # Then libpq reads back the same user and password, on the endpoint's host, database and TLS
    assert (parsed["user"], parsed["password"]) == (username, password)
    assert (parsed["host"], parsed["port"], parsed["dbname"], parsed["sslmode"]) == (
        "proxy.internal",
        "5432",
        "user_memory",
        "require",
    )


@given(password=passwords)
def test_a_malformed_endpoint_is_refused_without_quoting_it_or_the_password(password: str) -> None:
    # Given an endpoint that libpq cannot parse (a password pasted into it, with a bad escape)
    endpoint = f"postgresql://user_memory_api_login:{password}%zz@proxy.internal:5432/user_memory"
    # When a login's connection string is built on it
    with pytest.raises(ConfigError) as caught:
        login_conninfo(endpoint, "user_memory_api_login", password)
    # Then the error names the setting, and carries no part of the password
    assert "DATABASE_ENDPOINT" in str(caught.value) and password not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
