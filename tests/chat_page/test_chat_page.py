"""The chat page as an employee uses it: headless Chromium (Debian's, driven by Playwright),
signing in at a real OpenID provider (oidc-provider: its login and consent pages, code + PKCE,
JWT access tokens for the MCP server's audience), the real loop, MCP server and simulator as
processes, and the leave database checked after each step. The browser reaches nothing but this
machine. One person's tab goes through the tests in order, as a person would; screenshots are
kept in var/test-artifacts/chat-page/.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, Request, expect

from .chromium import ARTIFACTS, Offline, browser, offline_context, shoot
from .stack import XIAOMING, ChatStack, chat_stack

pytestmark = pytest.mark.timeout(300)

SHOTS = ARTIFACTS / "chat-page"
ACCESS_TOKEN_TTL = 12  # seconds: long enough for a step, short enough to wait out
CONFIRMATION_TIMEOUT = 15
HTML_REASON = (
    "<img src=x onerror=\"window.__injected='img'\">畢業典禮"
    "<script>window.__injected='script'</script>"
)
TIMEOUT_REASON = "年終旅行"
TWO_TABS_REASON = "看牙醫"
RESTART_REASON = "補牙"
SUBMIT = "把我那張家庭旅遊的特休送出審核"
CANCEL = "取消我表妹婚禮那張假"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ChatStack]:
    extra = [
        (9, 1, HTML_REASON),
        (10, 1, TIMEOUT_REASON),
        (11, 1, TWO_TABS_REASON),
        (12, 1, RESTART_REASON),
    ]
    with chat_stack(
        tmp_path_factory.mktemp("chat-page"),
        access_token_ttl=ACCESS_TOKEN_TTL,
        confirmation_timeout=CONFIRMATION_TIMEOUT,
        extra_leaves=extra,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def offline() -> Offline:
    return Offline()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    with browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def context(chromium: Browser, offline: Offline) -> Iterator[BrowserContext]:
    context = offline_context(chromium, offline)
    yield context
    context.close()


@dataclass
class Watch:
    """What the person's tab requested and said on its console (a CSP violation shows there)."""

    requests: list[Request] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def posted_runs(self) -> list[dict[str, Any]]:
        """The bodies of the runs the page started."""
        return [r.post_data_json for r in self.requests
                if r.method == "POST" and r.url.endswith("/v1/runs")]  # fmt: skip


@pytest.fixture(scope="module")
def watch() -> Watch:
    return Watch()


@pytest.fixture(scope="module")
def tab(context: BrowserContext, watch: Watch) -> Page:
    """The person's tab."""
    page = context.new_page()
    page.on("console", lambda m: watch.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: watch.console.append(f"pageerror: {e}"))
    page.on("request", lambda r: watch.requests.append(r))
    return page


# -- what a person does ----------------------------------------------------------------------


def sign_in(page: Page, stack: ChatStack, *, shots: str | None = None) -> None:
    """Through the provider's pages: its login (when it has no session), its consent (when
    there is no grant yet), back to the page signed in."""
    login = page.get_by_role("button", name="登入", exact=True)
    allow = page.get_by_role("button", name="允許")
    signed_in = page.locator("#account:not([hidden])")
    page.get_by_role("button", name="使用公司帳號登入").click()
    expect(login.or_(allow).or_(signed_in)).to_be_visible()
    if login.is_visible():
        if shots:
            shoot(page, SHOTS, f"{shots}-provider-login")
        page.get_by_label("帳號").fill(XIAOMING.username)
        page.get_by_label("密碼").fill(XIAOMING.password)
        login.click()
        expect(allow.or_(signed_in)).to_be_visible()
    if allow.is_visible():
        if shots:
            shoot(page, SHOTS, f"{shots}-provider-consent")
        allow.click()
    expect(signed_in).to_be_visible()
    assert page.url == f"{stack.loop}/"
    expect(page.locator("#who")).to_have_text(XIAOMING.name)


def ask(page: Page, text: str | None, *, keyboard: bool = False) -> Locator:
    """Type (None: what the box holds) and press Enter, once the page takes a message (the
    conversation so far read back, no run going); the request's turn in the conversation.
    `keyboard`: typed where the focus is, as a person with the keyboard alone would."""
    expect(page.get_by_role("button", name="送出")).to_be_enabled()
    turns = page.locator("#log > li")
    before = turns.count()
    box = page.get_by_label("你的請求")
    if keyboard:
        page.keyboard.type(text or "")
        page.keyboard.press("Enter")
    else:
        if text is not None:
            box.fill(text)
        box.press("Enter")
    expect(turns).to_have_count(before + 1)
    return turns.nth(before)


def finished(turn: Locator, timeout: float = 30_000) -> Locator:
    expect(turn.locator(".working")).to_have_count(0, timeout=timeout)
    return turn


def card_of(turn: Locator) -> Locator:
    card = turn.locator("section.confirm").last
    expect(card).to_be_visible()
    return card


# -- the flows -------------------------------------------------------------------------------


def test_an_employee_signs_in_at_the_company_provider_and_submits_the_draft(tab, stack):
    tab.goto(f"{stack.loop}/")
    expect(tab.get_by_role("button", name="使用公司帳號登入")).to_be_visible()
    sign_in(tab, stack, shots="01")
    assert "code=" not in tab.url  # the code left the address bar
    turn = finished(ask(tab, SUBMIT))
    draft = stack.book.leave("家庭旅遊")
    expect(turn.locator(".activity")).to_contain_text("查詢假單「家庭旅遊」：找到 1 張")
    expect(turn.locator(".activity")).to_contain_text(f"已送出審核 {draft.id}（草稿 → 審核中）")
    expect(turn.locator(".bubble.assistant")).to_contain_text(f"已將 {draft.id} 送出審核")
    shoot(tab, SHOTS, "02-submitted")
    assert draft.status == "submitted"
    audit = stack.book.audit(draft.id)
    assert [(a.actor, a.tool, a.from_status, a.to_status, a.outcome) for a in audit] == [
        ("E001", "update_leave_status", "draft", "submitted", "applied")
    ]
    # the provider issued a JWT access token for the MCP server's audience through PKCE
    assert stack.provider.events("grant")[0]["grant_type"] == "authorization_code"


def test_the_wedding_leave_is_kept_when_declined_and_cancelled_when_accepted(tab, stack):
    wedding = stack.book.leave("表妹婚禮")
    balance = stack.book.balance("E001", "特休")
    turn = ask(tab, CANCEL)
    card = card_of(turn)
    # what will happen, before anything does: the leave, its dates, the days returned
    for text in (wedding.id, f"{wedding.start_date}～{wedding.end_date}（2.0 天）", "回台南參加表妹婚禮",
                 "退回 2 天特休"):  # fmt: skip
        expect(card).to_contain_text(text.replace("2.0 天", "2 天"))
    expect(card.get_by_role("button", name=f"確認取消 {wedding.id}，退回 2 天特休")).to_be_visible()
    shoot(tab, SHOTS, "03-confirmation")
    card.get_by_role("button", name=f"不要取消，保留 {wedding.id}").click()
    finished(turn)
    expect(card).to_contain_text("你選擇不要：假單維持已核准，沒有任何變更。")
    expect(turn.locator(".activity")).to_contain_text(f"你選擇不取消，假單 {wedding.id} 維持已核准")
    shoot(tab, SHOTS, "04-declined")
    assert stack.book.leave("表妹婚禮").status == "approved"

    turn = ask(tab, CANCEL)
    card_of(turn).get_by_role("button", name=f"確認取消 {wedding.id}，退回 2 天特休").click()
    finished(turn)
    expect(card_of(turn)).to_contain_text("你已確認。")
    expect(turn.locator(".activity")).to_contain_text(f"已取消假單 {wedding.id}，退回 2 天特休額度")
    shoot(tab, SHOTS, "05-cancelled")
    assert stack.book.leave("表妹婚禮").status == "cancelled"
    assert stack.book.balance("E001", "特休") == balance + 2
    assert [
        (a.actor, a.tool, a.from_status, a.to_status, a.confirmation, a.outcome)
        for a in stack.book.audit(wedding.id)
    ] == [
        ("E001", "cancel_approved_leave", "approved", "approved", "declined", "not_applied"),
        ("E001", "cancel_approved_leave", "approved", "cancelled", "accepted", "applied"),
    ]


def test_a_reload_keeps_the_conversation_and_new_conversation_starts_another(tab, stack, watch):
    session = tab.evaluate("sessionStorage.getItem('leave-chat.session')")
    logins = len(stack.provider.events("login"))
    tab.reload()  # the token is gone with the page's memory: through the provider, no prompt
    expect(tab.locator("#account")).to_be_visible()
    turns = tab.locator("#log > li")
    expect(turns).to_have_count(3)
    expect(turns.nth(0).locator(".activity")).to_contain_text("已送出審核")
    expect(turns.nth(1).locator(".activity")).to_contain_text("你選擇不取消")
    expect(turns.nth(2).locator(".bubble.assistant")).to_contain_text("已退回假期額度")
    assert len(stack.provider.events("login")) == logins
    shoot(tab, SHOTS, "06-after-reload")
    finished(ask(tab, "查一下我的病假"))
    assert watch.posted_runs()[-1]["session_id"] == session

    tab.get_by_role("button", name="新對話").click()
    expect(turns).to_have_count(0)
    finished(ask(tab, "查一下我的事假"))
    assert "session_id" not in watch.posted_runs()[-1]
    other = tab.evaluate("sessionStorage.getItem('leave-chat.session')")
    assert other and other != session
    tab.reload()
    expect(tab.locator("#account")).to_be_visible()
    expect(turns).to_have_count(1)
    expect(turns.first).to_contain_text("查一下我的事假")


def test_on_a_phone_with_the_keyboard_only_html_in_a_reason_stays_text(tab, stack, watch):
    tab.set_viewport_size({"width": 390, "height": 844})
    expect(tab.get_by_label("你的請求")).to_be_focused()  # where the page puts the person
    turn = finished(ask(tab, "查一下我畢業典禮的假單", keyboard=True))
    answer = turn.locator(".bubble.assistant .text")
    expect(answer).to_contain_text(HTML_REASON)  # the model repeated it: shown as written
    turn = ask(tab, "取消我畢業典禮那張假", keyboard=True)
    card = card_of(turn)
    expect(card).to_be_focused()
    expect(card.locator("dd").nth(3)).to_have_text(HTML_REASON)  # the database's reason, as text
    tab.keyboard.press("Tab")
    expect(tab.locator(":focus")).to_have_text(re.compile("^不要取消"))
    tab.keyboard.press("Tab")
    expect(tab.locator(":focus")).to_have_text(re.compile("^確認取消"))
    shoot(tab, SHOTS, "07-phone-keyboard-confirmation")
    tab.keyboard.press("Enter")
    finished(turn)
    expect(card).to_contain_text("你已確認。")
    assert stack.book.leave("畢業典禮").status == "cancelled"
    # nothing it said became markup, and nothing in it ran
    assert tab.evaluate("window.__injected") is None
    assert tab.locator("#log img, #log script").count() == 0
    sizes = tab.evaluate(
        "[document.documentElement.scrollWidth, innerWidth,"
        " document.querySelector('main').scrollWidth, document.querySelector('main').clientWidth]"
    )
    assert sizes[0] <= sizes[1] and sizes[2] <= sizes[3], sizes  # no sideways scrolling
    shoot(tab, SHOTS, "08-phone-html-as-text")

    started = len(watch.posted_runs())
    tab.evaluate(  # 20 MB pasted: refused by the page, with a reason, before any request
        "() => { const box = document.getElementById('message');"
        " box.value = 'x'.repeat(20 * 1024 * 1024); box.dispatchEvent(new Event('input')); }"
    )
    tab.get_by_label("你的請求").press("Enter")
    expect(tab.locator("#notice")).to_contain_text("訊息太長了：最多 4000 個字")
    assert len(watch.posted_runs()) == started
    tab.get_by_label("你的請求").fill("")
    tab.set_viewport_size({"width": 1280, "height": 900})


def test_an_expired_access_token_is_refreshed_without_the_person_noticing(tab, stack):
    time.sleep(ACCESS_TOKEN_TTL + 1)  # whatever token the page holds has expired by now
    refreshed = len(
        [g for g in stack.provider.events("grant") if g["grant_type"] == "refresh_token"]
    )
    turn = finished(ask(tab, "查一下我的病假"))
    expect(turn.locator(".bubble.assistant")).to_contain_text("找到 1 張假單")
    grants = [g["grant_type"] for g in stack.provider.events("grant")]
    assert grants.count("refresh_token") > refreshed, grants
    expect(tab.locator("#sign-in")).to_be_hidden()


def test_a_failing_model_and_a_stream_cut_midway_say_so_and_change_nothing(tab, stack, watch):
    statuses = {v: stack.book.leave(v).status for v in ("家庭旅遊", TIMEOUT_REASON)}
    # the model endpoint answers 500 to every call of this run: the loop retries, then fails
    turn = finished(ask(tab, "把我那張家庭旅遊的特休送出審核 [sim-fault:http_500]"))
    expect(turn.locator(".outcome.bad")).to_have_text(
        "語言模型暫時沒有回應，這次沒有完成：請稍後再試。"
    )

    def cut_before_the_end(route) -> None:
        if route.request.method != "POST":
            route.fallback()
            return
        answer = route.fetch()
        body = answer.body()
        route.fulfill(status=answer.status, headers=answer.headers,
                      body=body[: body.index(b"event: run.finished")])  # fmt: skip

    tab.route("**/v1/runs", cut_before_the_end)
    try:
        turn = finished(ask(tab, "查一下我的年終旅行假單"))
    finally:
        tab.unroute("**/v1/runs")
    # the page read the run back after its stream ended early, and shows how it ended
    assert any(r.method == "GET" and "/v1/runs/run_" in r.url for r in watch.requests)
    expect(turn.locator(".bubble.assistant")).to_contain_text("找到 1 張假單")
    expect(turn.locator(".activity")).to_contain_text("查詢假單「年終旅行」：找到 1 張")
    shoot(tab, SHOTS, "09-stream-cut-midway")
    assert {v: stack.book.leave(v).status for v in statuses} == statuses


def test_a_confirmation_nobody_answers_is_shown_as_timed_out(tab, stack):
    leave = stack.book.leave(TIMEOUT_REASON)
    turn = ask(tab, f"取消我{TIMEOUT_REASON}那張假")
    card = card_of(turn)
    finished(turn, timeout=(CONFIRMATION_TIMEOUT + 20) * 1000)
    expect(card).to_contain_text("你沒有在時限內回答，確認已逾時：假單維持已核准，沒有任何變更。")
    expect(card.get_by_role("button", name=f"確認取消 {leave.id}，退回 1 天特休")).to_be_disabled()
    expect(turn.locator(".activity")).to_contain_text(
        f"確認沒有完成（逾時或已取消），假單 {leave.id} 沒有任何變更"
    )
    shoot(tab, SHOTS, "10-confirmation-timed-out")
    assert stack.book.leave(TIMEOUT_REASON).status == "approved"
    assert [(a.confirmation, a.outcome) for a in stack.book.audit(leave.id)] == [
        ("cancelled", "not_applied")
    ]


def test_a_confirmation_answered_in_two_tabs_counts_once(tab, context, stack):
    leave = stack.book.leave(TWO_TABS_REASON)
    turn = ask(tab, f"取消我{TWO_TABS_REASON}那張假")
    card = card_of(turn)
    other = context.new_page()  # the same person, another tab (the provider's session: no prompt)
    try:
        other.goto(f"{stack.loop}/")
        sign_in(other, stack)
        session = tab.evaluate("sessionStorage.getItem('leave-chat.session')")
        other.evaluate("s => sessionStorage.setItem('leave-chat.session', s)", session)
        other.reload()  # that conversation, read back: the question is still open there too
        expect(other.locator("#account")).to_be_visible()
        other_card = card_of(other.locator("#log > li").last)
        # the other tab stops reading the run meanwhile, so its buttons are still live
        other.route(
            "**/v1/runs/run_*", lambda r: r.abort() if r.request.method == "GET" else r.fallback()
        )
        card.get_by_role("button", name=re.compile("^確認取消")).click()
        finished(turn)
        other_card.get_by_role("button", name=re.compile("^不要")).click()
        expect(other_card.locator(".result")).to_have_text(
            re.compile("^這個確認(已經回答過了|已經不在等待中)")
        )
        shoot(other, SHOTS, "11-answered-in-another-tab")
        other.unroute("**/v1/runs/run_*")
    finally:
        other.close()
    assert stack.book.leave(TWO_TABS_REASON).status == "cancelled"
    assert [(a.confirmation, a.outcome) for a in stack.book.audit(leave.id)] == [
        ("accepted", "applied")
    ]


def test_the_loop_restarting_while_a_question_waits_leaves_it_to_answer_in_the_page(tab, stack):
    leave = stack.book.leave(RESTART_REASON)
    turn = ask(tab, f"取消我{RESTART_REASON}那張假")
    card = card_of(turn)
    stack.loop_process.stop()  # the stream ends with the loop; the page follows the run
    expect(turn.locator(".outcome")).to_have_text("與服務的連線中斷了，正在追蹤這次的結果…")
    stack.loop_process.start()  # the new loop takes the waiting run over
    card.get_by_role("button", name=f"確認取消 {leave.id}，退回 1 天特休").click()
    finished(turn)
    expect(card).to_contain_text("你已確認")  # its answer went to the loop that took over
    expect(turn.locator(".activity")).to_contain_text(f"已取消假單 {leave.id}，退回 1 天特休額度")
    shoot(tab, SHOTS, "12-answered-after-a-loop-restart")
    assert stack.book.leave(RESTART_REASON).status == "cancelled"
    assert [(a.confirmation, a.outcome) for a in stack.book.audit(leave.id)][-1] == (
        "accepted",
        "applied",
    )


def test_a_token_the_provider_no_longer_honours_asks_to_sign_in_again_keeping_the_message(
    tab, stack
):
    stack.provider.restart()  # a new signing key, no sessions: every token issued is void
    logins = len(stack.provider.events("login"))
    message = "把我那張家庭旅遊的特休送出審核，謝謝"
    box = tab.get_by_label("你的請求")
    box.fill(message)
    box.press("Enter")
    expect(tab.locator("#sign-in")).to_be_visible()
    expect(tab.locator("#sign-in-note")).to_have_text(
        "你的登入已過期，請重新登入。你輸入的訊息已保留。"
    )
    shoot(tab, SHOTS, "13-sign-in-again")
    sign_in(tab, stack)  # the provider's login page again: it has no session any more
    assert len(stack.provider.events("login")) == logins + 1
    expect(box).to_have_value(message)
    turn = finished(ask(tab, None))
    expect(turn.locator(".activity")).to_contain_text("查詢假單「家庭旅遊」：找到 1 張")
    # it was submitted in the first test
    expect(turn.locator(".bubble.assistant")).to_contain_text("目前是審核中，無法執行這個操作")
    assert stack.book.leave("家庭旅遊").status == "submitted"


def test_sign_out_ends_the_session_here_and_at_the_provider(tab, stack):
    tab.get_by_role("button", name="登出").click()
    expect(tab.get_by_text("要登出公司帳號嗎？")).to_be_visible()  # the provider's own question
    tab.get_by_role("button", name="登出", exact=True).click()
    tab.wait_for_url(f"{stack.loop}/")
    expect(tab.locator("#sign-in-note")).to_have_text("你已登出。")
    expect(tab.locator("#log > li")).to_have_count(0)
    assert tab.evaluate("sessionStorage.getItem('leave-chat.session')") is None
    assert stack.provider.events("end_session")
    shoot(tab, SHOTS, "14-signed-out")
    tab.get_by_role("button", name="使用公司帳號登入").click()
    expect(tab.get_by_role("button", name="登入", exact=True)).to_be_visible()  # asked again
    tab.goto(f"{stack.loop}/")


def test_the_page_needed_nothing_but_this_machine_and_broke_no_rule_of_its_policy(
    offline, watch, stack
):
    assert offline.blocked == []
    assert offline.requested and all(
        u.startswith((stack.loop, stack.provider.issuer)) for u in offline.requested
    )
    violations = [m for m in watch.console if "Content Security Policy" in m or "pageerror" in m]
    assert violations == []
