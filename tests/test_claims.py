"""The one claim checker the gate and the loop share, on answers models gave."""

from __future__ import annotations

from common.claims import claimed_changes, unverified_claims


def test_each_change_worded_as_done_is_claimed():
    assert claimed_changes("已將 LV-1a2b3c 送出審核。") == {"submitted"}
    assert claimed_changes("好的，已將假單送出審核，也已取消那張假。") == {"submitted", "cancelled"}
    assert claimed_changes("已將 LV-1a2b3c 核准。") == {"approved"}
    assert claimed_changes("已將 LV-1a2b3c 駁回。") == {"rejected"}
    assert claimed_changes("已建立草稿假單 LV-1a2b3c（特休）") == {"draft"}
    # the id after a space, as models write it
    assert claimed_changes("已取消 LV-1a2b3c，已核准 LV-9f8e7d。") == {"cancelled", "approved"}


def test_a_status_read_out_or_a_change_not_made_claims_nothing():
    assert claimed_changes("找到 1 張假單：LV-1a2b3c（特休，2 天，已核准，事由：婚禮）。") == set()
    assert claimed_changes("你沒有確認取消，假單 LV-1a2b3c 維持已核准，沒有任何變更。") == set()
    # the server's refusal, quoted: the other leave's status in brackets
    refused = (
        "這個操作沒有完成：日期與你現有的假單 LV-a0df16（2026-12-23，submitted（已送出審核））重疊"
    )
    assert claimed_changes(refused) == set()


def test_a_claim_is_unverified_unless_a_change_to_that_status_was_applied():
    answer = "已將 LV-1a2b3c 送出審核，也已取消那張假。"
    assert unverified_claims(answer, set()) == {"submitted", "cancelled"}
    assert unverified_claims(answer, {"submitted"}) == {"cancelled"}
    assert unverified_claims(answer, {"submitted", "cancelled"}) == set()
