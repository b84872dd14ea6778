"""Who owns runs and sessions (loop/owners.py): a token the leave system issued by itself, an
identity provider's access token by its issuer and subject, whatever token carries them."""

from __future__ import annotations

import base64
import json

from common.credentials import hash_token
from loop.owners import owner_key


def jwt(claims: object, signature: str = "c2ln") -> str:
    def part(data: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{signature}"


def test_an_issued_token_is_owned_by_itself():
    assert owner_key("demo-token-employee") == hash_token("demo-token-employee")


def test_every_access_token_of_one_person_at_one_provider_has_the_same_owner():
    first = jwt({"iss": "https://login.example.com", "sub": "p-1", "exp": 1, "jti": "a"})
    refreshed = jwt({"iss": "https://login.example.com", "sub": "p-1", "exp": 2, "jti": "b"})
    assert first != refreshed
    assert owner_key(first) == owner_key(refreshed) != hash_token(first)


def test_another_subject_or_another_issuer_is_someone_else():
    one = owner_key(jwt({"iss": "https://login.example.com", "sub": "p-1"}))
    assert owner_key(jwt({"iss": "https://login.example.com", "sub": "p-2"})) != one
    assert owner_key(jwt({"iss": "https://other.example.com", "sub": "p-1"})) != one


def test_a_token_that_names_no_person_is_owned_by_itself():
    for token in (
        jwt({"iss": "https://login.example.com"}),  # no subject
        jwt({"sub": "p-1"}),  # no issuer
        jwt({"iss": "https://login.example.com", "sub": 7}),
        jwt(["not", "an", "object"]),
        "a.b.c",  # three parts, none of them JSON
        "a.%%%.c",
    ):
        assert owner_key(token) == hash_token(token), token


def test_a_person_a_front_end_acts_for_owns_whatever_credential_or_token_carries_them():
    from loop.acting_for import acting

    person = "li.xiaohua@example.com"  # dots: never read as a JWT's parts
    by_one = owner_key(acting("tok-front-end-1", person))
    assert by_one == owner_key(acting("tok-front-end-2", person))
    # even a bearer that looks like a JWT: the person it names owns the run, not its claims
    token = jwt({"iss": "https://login.example.com", "sub": "someone-else"})
    assert owner_key(acting(token, person)) == by_one != owner_key(token)
    assert by_one != owner_key(acting("tok-front-end-1", "wang.wu@example.com"))
