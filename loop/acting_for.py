"""A front end acting for a person, as the loop carries it (docs/identity.md).

A front end's credential names no employee: the front end names, with each request, the person
it acts for, and the loop passes both on to the MCP server with every call (the credential as
the bearer token, the person in `X-Leave-Acting-For`), which decides who acts.

The loop carries the pair as one credential string: the token and the person joined by a
newline, which no bearer token holds (RFC 6750). So everything the loop keys by a token — its
MCP connections, the tokens the server refused — is keyed by the pair.

What the loop records for the person (runs, sessions, conversations) is owned by the person
alone (`owner_key`), not by the front end's credential: a person behind a shared front end
never reaches another's, and their conversations survive the credential's rotation. The key is
taken only once the MCP server accepted the pair, so whoever has it may act as the person.
"""

from __future__ import annotations

from common.credentials import hash_token

ACTING_FOR_HEADER = "X-Leave-Acting-For"
_JOIN = "\n"


def acting(token: str, person: str) -> str:
    """The credential of a front end (its `token`) acting for `person` (their email)."""
    return f"{token}{_JOIN}{person}"


def parts(credential: str) -> tuple[str, str | None]:
    """(the bearer token, the person it acts for or None) of a credential the loop carries."""
    token, _, person = credential.partition(_JOIN)
    return token, person or None


def owner_key(credential: str) -> str:
    """Who owns the runs and sessions made with a credential the MCP server accepted: the
    person a front end acts for (whatever front end, whatever credential of it), else the
    token's own hash."""
    _, person = parts(credential)
    if person is None:
        return hash_token(credential)
    return hash_token(f"acting-for{_JOIN}{person}")  # no token hashes alike: it has a newline
