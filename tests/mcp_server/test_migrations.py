"""The leave database's schema: made and upgraded by its migrations, from every schema a
shipped server made (tests/schemas.py), on SQLite and, with --database-url, PostgreSQL; the
operator's seed --reset and schema commands on a migrated database."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import create_engine

from common.credentials import hash_token
from common.migrations import compare, current_revision
from mcp_server.identity import FrontEnd, Identities
from mcp_server.leaves import LeaveService
from mcp_server.migrations import MIGRATIONS
from mcp_server.seed import seed
from mcp_server.storage import Base, Database, Employee
from tests.schemas import shipped
from tests.support import run_to_exit

CREATED = dt.datetime(2026, 1, 5, 9, 30, tzinfo=dt.UTC)
REVISIONS = ["m0001", "m0002", "m0003", "m0004"]
OLD_TOKENS = ("token-of-e001", "token-of-m001")
# Rows as an older server wrote them; each schema takes the columns it had.
ROWS = {
    "employees": [
        {"id": "M001", "name": "王經理", "manager_id": None},
        {"id": "E001", "name": "林小明", "manager_id": "M001"},
    ],
    "api_tokens": [
        {
            "token_sha256": hash_token(token),
            "employee_id": employee,
            "is_demo": False,
            "created_at": CREATED,
        }
        for token, employee in zip(OLD_TOKENS, ("E001", "M001"), strict=True)
    ],
    "leaves": [
        {
            "id": "L-OLD-1",
            "employee_id": "E001",
            "leave_type": "特休",
            "start_date": dt.date(2026, 2, 2),
            "end_date": dt.date(2026, 2, 3),
            "days": 2.0,
            "status": "draft",
            "reason": "家庭旅遊",
            "created_at": CREATED,
            "updated_at": CREATED,
        }
    ],
    "balances": [{"employee_id": "E001", "leave_type": "特休", "remaining_days": 7.0}],
    "audit_log": [
        {
            "leave_id": "L-OLD-1",
            "actor_id": "E001",
            "at": CREATED,
            "tool": "create_leave_draft",
            "from_status": None,
            "to_status": "draft",
            "confirmation": None,
            "outcome": "applied",
        }
    ],
    "pending_confirmations": [
        {"leave_id": "L-OLD-1", "actor_id": "E001", "tool": "submit_leave", "asked_at": CREATED}
    ],
}


@pytest.mark.parametrize("schema", shipped("leave"), ids=lambda schema: schema.name)
def test_a_database_every_shipped_server_made_is_upgraded_with_its_rows(
    tmp_path, new_database_url, schema
):
    url = new_database_url(tmp_path, "leave")
    engine = create_engine(url)
    schema.create(engine, ROWS)
    assert current_revision(engine, MIGRATIONS) is None  # made before migrations
    database = Database(url)
    try:
        assert database.create_schema() == REVISIONS
        assert current_revision(engine, MIGRATIONS) == MIGRATIONS.head == REVISIONS[-1]
        with engine.connect() as connection:
            assert compare(connection, MIGRATIONS, Base.metadata) == []

        identities = Identities(database)
        # tokens issued before tokens had ids were given one, and still let their people in
        listed = {t.employee_id: t for t in identities.tokens()}
        assert sorted(listed) == ["E001", "M001"]
        assert all(t.public_id.startswith("tok_") for t in listed.values())
        assert len({t.public_id for t in listed.values()}) == 2
        assert identities.employee_for_token(OLD_TOKENS[0]) == "E001"
        assert identities.active_employee("E001")  # active NULL: a row older versions wrote
        assert identities.revoke(listed["M001"].public_id)
        identities.flush()

        service = LeaveService(database)
        (old,) = service.search("E001", "家庭旅遊", None)
        assert (old.leave_id, old.days, old.status) == ("L-OLD-1", 2.0, "draft")
        assert [e.to_status for e in service.audit_trail("L-OLD-1")] == ["draft"]
        # the newest columns take writes: a front end's credential (no employee of its own)
        # acting for a person by their email, and the audit entry naming it
        token, public_id = identities.issue_front_end("open-webui")
        with database.write() as s:
            s.get(Employee, "E001").email = "e001@example.com"
        assert identities.credential_for_token(token).front_end == "open-webui"
        assert identities.employee_by_email("E001@example.com") == "E001"
        service.create("E001", "特休", "2026-03-02", "2026-03-02", "新", FrontEnd("x", public_id))
        assert service.audit_trail(service.search("E001", "新", None)[0].leave_id)[0].front_end
        # an employee who left
        assert identities.deactivate("E001") is True
        assert not identities.active_employee("E001")
    finally:
        database.dispose()
        engine.dispose()


def test_a_database_at_the_newest_revision_applies_nothing(tmp_path, new_database_url):
    database = Database(new_database_url(tmp_path))
    try:
        assert database.create_schema() == REVISIONS
        assert database.create_schema() == []
    finally:
        database.dispose()


def test_seed_reset_drops_the_schema_and_makes_it_again(tmp_path, new_database_url):
    database = Database(new_database_url(tmp_path))
    try:
        assert seed(database) is True
        assert seed(database, reset=True) is True  # the version went with the tables
        assert current_revision(database.engine, MIGRATIONS) == MIGRATIONS.head
    finally:
        database.dispose()


def test_the_schema_command_names_the_revision_and_changes_nothing(tmp_path):
    env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'leave.db'}"}
    assert run_to_exit(["mcp_server", "schema"], env) == (
        0,
        "the leave database: no schema version (empty, or made before migrations); the next "
        "start applies m0001, m0002, m0003, m0004\n",
    )
    assert run_to_exit(["mcp_server", "seed"], env)[0] == 0
    assert run_to_exit(["mcp_server", "schema"], env) == (
        0,
        f"the leave database: schema at {MIGRATIONS.head} (newest)\n",
    )
