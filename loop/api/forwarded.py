"""The person a front end forwards with a request, for the MCP server to act as (docs/identity.md).

A front end names its person by email: in `X-Leave-Acting-For` (any front end or bot that can
send a header: LibreChat's custom endpoint `headers` with its user's email placeholder), or in
the user headers Open WebUI sends with `ENABLE_FORWARD_USER_INFO_HEADERS=true`, of which
`X-OpenWebUI-User-Email` names the person (its user id, name and role are Open WebUI's own and
name no employee). The loop never decides whether the caller may act for them: it passes the
person on with its credential, and the MCP server decides, on every call. A forwarded identity
is never ignored either: one that names nobody, or two people, is a 400 here.
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers

# The headers that name the person, the generic one first.
PERSON_HEADERS = ("x-leave-acting-for", "x-openwebui-user-email")
# Open WebUI's other user headers: a forwarded identity too, but none names an employee.
OTHER_USER_HEADERS = ("x-openwebui-user-id", "x-openwebui-user-name", "x-openwebui-user-role")
EMAIL = re.compile(r"[\x21-\x7e]{1,254}")  # visible ASCII, an email's length at most


class BadForwarding(ValueError):
    """A forwarded identity that names no one, or more than one person."""


def forwarded_person(headers: Headers) -> str | None:
    """The email of the person the request is forwarded for (in lower case), None when it
    forwards no one; BadForwarding otherwise."""
    named: dict[str, str] = {}
    for header in PERSON_HEADERS:
        values = headers.getlist(header)
        if len(values) > 1:
            raise BadForwarding(f"{header}: given {len(values)} times; name one person")
        if values:
            if not EMAIL.fullmatch(values[0].strip()):
                raise BadForwarding(
                    f"{header}: the person's email, visible ASCII, at most 254 characters"
                )
            named[header] = values[0].strip().lower()
    if len(set(named.values())) > 1:
        raise BadForwarding(f"{' and '.join(named)} name different people")
    if named:
        return next(iter(named.values()))
    others = [header for header in OTHER_USER_HEADERS if header in headers]
    if others:
        raise BadForwarding(
            f"{others[0]}: a forwarded user is named by email ({' or '.join(PERSON_HEADERS)}), "
            "and this request has none"
        )
    return None
