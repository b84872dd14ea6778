"""The chat page as the loop serves it, without a browser: its files and nothing else of the
folder, the headers that keep it safe, how it signs people in for each setting, and what its
scripts may never do (turn data into markup, load anything from elsewhere)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from loop.api.chat_page import ASSETS, PAGE
from loop.app import create_app
from loop.settings import LoopSettings
from tests.support import free_port, serving_in_thread

ISSUER = "https://login.example.com/realms/staff"


def settings(tmp_path: Path, **chat: object) -> LoopSettings:
    return LoopSettings(
        store_url=f"sqlite:///{tmp_path / 'loop.db'}",
        mcp_url=f"http://127.0.0.1:{free_port()}/mcp",
        **chat,  # type: ignore[arg-type]
    )


@pytest.fixture
def oidc_loop(tmp_path) -> Iterator[str]:
    chat = settings(
        tmp_path,
        chat_oidc_issuer=ISSUER,
        chat_oidc_client_id="leave-chat",
        chat_oidc_scopes="openid profile offline_access",
        chat_oidc_resource="https://leave.example.com/mcp",
    )
    with serving_in_thread(create_app(chat), "the loop") as base:
        yield base


def test_the_page_and_its_files_are_served_with_a_strict_policy(oidc_loop):
    page = httpx.get(f"{oidc_loop}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'lang="zh-Hant-TW"' in page.text
    policy = dict(
        part.split(" ", 1) for part in page.headers["content-security-policy"].split("; ")
    )
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    # the identity provider's origin, for discovery and the token endpoint; nothing else
    assert policy["connect-src"] == "'self' https://login.example.com"
    assert policy["frame-ancestors"] == "'none'" and policy["base-uri"] == "'none'"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    for name, media_type in ASSETS.items():
        asset = httpx.get(f"{oidc_loop}/chat/{name}")
        assert asset.status_code == 200, name
        assert asset.headers["content-type"] == media_type
        assert asset.content == (PAGE / name).read_bytes()


def test_only_the_pages_own_files_are_served(oidc_loop):
    for path in ("/chat/index.html", "/chat/../app.py", "/chat/%2e%2e%2fsettings.py",
                 "/chat/app.js.map", "/chat/"):  # fmt: skip
        assert httpx.get(f"{oidc_loop}{path}").status_code == 404, path
    served = {*ASSETS, "index.html"}
    assert {p.name for p in PAGE.iterdir()} == served  # nothing in the folder goes unserved


def test_the_config_says_how_to_sign_in_and_holds_no_secret(oidc_loop, tmp_path):
    config = httpx.get(f"{oidc_loop}/chat/config")
    assert config.headers["cache-control"] == "no-store"
    assert config.json() == {
        "sign_in": "oidc",
        "issuer": ISSUER,
        "client_id": "leave-chat",
        "scopes": "openid profile offline_access",
        "resource": "https://leave.example.com/mcp",
        "demo_employees": [],
        "confirmation_timeout_seconds": 120.0,
        "max_input_chars": 4000,
    }
    with serving_in_thread(create_app(settings(tmp_path)), "a development loop") as base:
        demo = httpx.get(f"{base}/chat/config").json()
        policy = httpx.get(f"{base}/").headers["content-security-policy"]
    assert demo["sign_in"] == "demo" and demo["issuer"] is None
    assert [(e["employee_id"], e["role"]) for e in demo["demo_employees"]] == [
        ("E001", "employee"),
        ("E002", "employee"),
        ("M001", "manager"),
    ]
    assert "connect-src 'self';" in policy
    off = settings(tmp_path, chat_demo_sign_in=False)
    with serving_in_thread(create_app(off), "a loop without sign-in") as base:
        assert httpx.get(f"{base}/chat/config").json()["sign_in"] == "none"


@pytest.mark.parametrize(
    ("chat", "says"),
    [
        ({"chat_oidc_issuer": ISSUER}, "LOOP_CHAT_OIDC_ISSUER needs LOOP_CHAT_OIDC_CLIENT_ID"),
        ({"chat_oidc_issuer": "http://login.example.com", "chat_oidc_client_id": "c"},
         "must be https://"),
        ({"chat_oidc_issuer": ISSUER, "chat_oidc_client_id": "c", "chat_oidc_scopes": "profile"},
         "must include openid"),
    ],
    ids=["no-client-id", "plain-http", "no-openid-scope"],
)  # fmt: skip
def test_an_incomplete_or_unsafe_sign_in_setting_is_refused(tmp_path, chat, says):
    with pytest.raises(ValidationError, match=says):
        settings(tmp_path, **chat)
    assert settings(tmp_path, chat_oidc_issuer="http://127.0.0.1:9000", chat_oidc_client_id="c")


SCRIPTS = sorted(PAGE.glob("*.js"))
# Ways a script turns a string into markup or code; the page uses textContent only.
MARKUP_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setAttribute\(\s*['\"]on|\.src\s*=|srcdoc|DOMParser|createContextualFragment"
)


def test_no_script_of_the_page_turns_text_into_markup_or_code():
    assert len(SCRIPTS) == 4
    found = {p.name: MARKUP_SINKS.findall(p.read_text(encoding="utf-8")) for p in SCRIPTS}
    assert found == {p.name: [] for p in SCRIPTS}


def test_the_page_loads_nothing_from_elsewhere_and_nothing_inline():
    html = (PAGE / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)  # every script is a file of ours
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html)  # no inline style or handler
    for path in (PAGE / "index.html", PAGE / "chat.css", *SCRIPTS):
        text = path.read_text(encoding="utf-8")
        assert not re.search(
            r"(src|href)=\"(https?:)?//|@import|url\(\s*['\"]?(https?:)?//", text
        ), path
    referenced = set(re.findall(r"(?:src|href)=\"chat/([^\"]+)\"", html))
    for script in SCRIPTS:
        referenced |= set(re.findall(r"from '\./([^']+)'", script.read_text(encoding="utf-8")))
    assert referenced == set(ASSETS)  # every file served is used, every file used is served
