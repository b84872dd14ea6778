"""The company's people from its HR export, and the operator's commands around them, as the
operator runs them: `python -m mcp_server …` on a real database."""

from __future__ import annotations

import json
import secrets

import pytest
from sqlalchemy import select

from mcp_server.identity import Identities, TokenRefused
from mcp_server.storage import Balance, Database, Employee
from tests.support import run_to_exit, seed_database

HEADER = "employee_id,name,manager_id,特休,病假,事假,補休\n"
COMPANY = HEADER + (
    "C100,林大為,,15,30,14,0\nC200,黃淑芬,C100,12.5,30,14,1\nC201,張志明,C200,7,28,14,0\n"
)


@pytest.fixture
def db_url(tmp_path, new_database_url) -> str:
    url = new_database_url(tmp_path)
    seed_database(url)
    return url


def cli(db_url: str, *args: str, **env: str) -> tuple[int, str]:
    return run_to_exit(["mcp_server", *args], {"MCP_DATABASE_URL": db_url, **env})


def people(db_url: str) -> dict[str, tuple[str, str | None, dict[str, float]]]:
    db = Database(db_url)
    try:
        with db.read() as s:
            balances: dict[str, dict[str, float]] = {}
            for b in s.scalars(select(Balance)).all():
                balances.setdefault(b.employee_id, {})[b.leave_type] = b.remaining_days
            return {
                e.id: (e.name, e.manager_id, balances.get(e.id, {}))
                for e in s.scalars(select(Employee)).all()
                if e.id.startswith("C")
            }
    finally:
        db.dispose()


def test_an_export_creates_the_people_and_a_second_import_changes_nothing(tmp_path, db_url):
    export = tmp_path / "people.csv"
    export.write_text(COMPANY)
    status, said = cli(db_url, "import", str(export))
    assert status == 0, said
    assert said.splitlines()[-1] == "import: 3 employee(s) created, 0 updated, 0 unchanged"
    first = people(db_url)
    assert first["C201"] == (
        "張志明",
        "C200",
        {"特休": 7.0, "病假": 28.0, "事假": 14.0, "補休": 0.0},
    )
    assert first["C100"][1] is None
    status, said = cli(db_url, "import", str(export))
    assert (status, said.splitlines()[-1]) == (
        0, "import: 0 employee(s) created, 0 updated, 3 unchanged — nothing to do"
    )  # fmt: skip
    assert people(db_url) == first


def test_a_dry_run_says_what_would_change_and_writes_nothing(tmp_path, db_url):
    export = tmp_path / "people.csv"
    export.write_text(COMPANY)
    cli(db_url, "import", str(export))
    before = people(db_url)
    export.write_text(COMPANY.replace("張志明,C200,7", "張志明,C100,5"))
    status, said = cli(db_url, "import", str(export), "--dry-run")
    assert status == 0, said
    assert "~ C201: manager C200 → C100; 特休 7 → 5" in said
    assert said.splitlines()[-1] == (
        "import (dry run): 0 employee(s) would be created, 1 would be updated, 2 unchanged"
    )
    assert people(db_url) == before


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ("C300,王五,C999,1,1,1,1\n", "line 5: manager_id C999 of C300 is no employee"),
        (
            "C300,王五,C301,1,1,1,1\nC301,趙六,C300,1,1,1,1\n",
            "line 5: managers form a cycle: C300 → C301 → C300",
        ),
        ("C300,王五,C300,1,1,1,1\n", "line 5: managers form a cycle: C300 → C300"),
        ("C300,王五,C100,-1,1,1,1\n", "line 5: 特休 balance -1 is negative"),
        ("C300,王五,C100,很多,1,1,1\n", "line 5: 特休 balance '很多' is no number"),
        ("C201,重複,C100,1,1,1,1\n", "line 5: employee_id C201 is on line 4 too"),
        ("C300,,C100,1,1,1,1\n", "line 5: C300 has no name"),
        ("C300,王五,C100,1,1\n", "line 5: 5 cells, the header has 7"),
    ],
)
def test_a_bad_row_is_refused_with_its_line_and_reason_and_nothing_is_written(
    tmp_path, db_url, rows, problem
):
    export = tmp_path / "people.csv"
    export.write_text(COMPANY + rows)
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert said.splitlines()[0] == "error: import refused, nothing written:"
    assert any(line.startswith(problem) for line in said.splitlines()), said
    assert people(db_url) == {}  # not even the good rows


def test_every_bad_row_is_named_at_once_and_an_unknown_leave_type_column_is_refused(
    tmp_path, db_url
):
    export = tmp_path / "people.csv"
    export.write_text("employee_id,name,manager_id,特休,年終\nC1,甲,,x,1\nC2,乙,C9,1,1\n")
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert "line 1: column '年終' is no leave type (known: 特休、病假、事假、補休)" in said
    export.write_text("employee_id,name,manager_id,特休\nC1,甲,,x\nC2,乙,C9,-2\n")
    said = cli(db_url, "import", str(export))[1]
    assert "line 2: 特休 balance 'x' is no number" in said
    assert "line 3: 特休 balance -2 is negative" in said


def test_a_file_that_is_not_utf8_is_one_line(tmp_path, db_url):
    export = tmp_path / "people.csv"
    export.write_bytes(COMPANY.encode("big5"))
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert said.splitlines()[1].endswith("not UTF-8 (byte 28): export it as UTF-8")


def test_someone_who_left_is_deactivated_their_tokens_stop_and_their_history_stays(
    tmp_path, db_url
):
    export = tmp_path / "people.csv"
    export.write_text(COMPANY)
    cli(db_url, "import", str(export))
    status, token = cli(db_url, "issue-token", "C201", "--label", "laptop")
    token = token.splitlines()[0]
    db = Database(db_url)
    try:
        assert Identities(db).employee_for_token(token) == "C201"
        export.write_text(HEADER.replace("\n", ",active\n") + "C201,張志明,C200,7,28,14,0,false\n")
        said = cli(db_url, "import", str(export))[1]
        assert "~ C201: deactivated (left the company)" in said
        with pytest.raises(TokenRefused, match="no longer works here"):
            Identities(db).employee_for_token(token)
        assert "C201" in people(db_url)  # the row, balances and history stay
    finally:
        db.dispose()
    status, said = cli(db_url, "issue-token", "C201")
    assert (status, said.strip()) == (2, "error: issue-token: C201 has left (deactivated)")


def test_tokens_are_issued_listed_and_revoked_by_id_and_the_secret_is_shown_once(db_url):
    status, said = cli(db_url, "issue-token", "E001", "--expires-in", "30d", "--label", "ci bot")
    assert status == 0, said
    token, note = said.splitlines()
    public_id = note.split()[1]
    assert public_id.startswith("tok_") and "expires" in note
    listing = cli(db_url, "list-tokens")[1]
    (row,) = [line for line in listing.splitlines() if line.startswith(public_id)]
    assert row.split()[1:3] == ["E001", "active"] and "ci bot" in row
    assert token not in listing
    assert cli(db_url, "revoke-token", public_id)[0] == 0
    (row,) = [line for line in cli(db_url, "list-tokens")[1].splitlines() if public_id in line]
    assert row.split()[2] == "revoked"
    assert cli(db_url, "revoke-token", "tok_nope") == (
        2, "error: revoke-token: no token 'tok_nope' (see list-tokens)\n"
    )  # fmt: skip
    assert cli(db_url, "issue-token", "E001", "--expires-in", "soon")[1].strip() == (
        "error: issue-token: --expires-in: 'soon' is not a duration such as 90d, 12h, 30m or 3600s"
    )


def test_in_production_the_seed_step_creates_the_schema_and_nothing_else(
    tmp_path, new_database_url
):
    url = new_database_url(tmp_path, "prod")
    env = {"MCP_ENV": "production", "MCP_ELICITATION_STATE_KEY": secrets.token_hex(32)}
    status, said = cli(url, "seed", **env)
    assert status == 0 and "no demo data" in said
    db = Database(url)
    try:
        with db.read() as s:
            assert s.scalars(select(Employee)).all() == []
        assert Identities(db).demo_tokens() == 0
    finally:
        db.dispose()
    assert cli(url, "seed", "--reset", **env)[0] == 2


def test_an_export_on_standard_input_is_imported(db_url):
    """`compose exec -T mcp-server python -m mcp_server import - < people.csv`: no copy into
    the container, whatever the file's owner and mode."""
    status, output = run_to_exit(
        ["mcp_server", "import", "-"], {"MCP_DATABASE_URL": db_url}, input=COMPANY
    )
    assert status == 0, output
    said = output.splitlines()
    assert said[-1] == "import: 3 employee(s) created, 0 updated, 0 unchanged"
    assert people(db_url)["C200"] == (
        "黃淑芬", "C100", {"特休": 12.5, "病假": 30.0, "事假": 14.0, "補休": 1.0}
    )  # fmt: skip


def test_a_cell_too_long_for_csv_names_the_file_and_its_line_not_the_database(tmp_path, db_url):
    """It said "configuration error: MCP_DATABASE_URL: cannot open the leave database: field
    larger than field limit"."""
    export = tmp_path / "people.csv"
    export.write_text(
        COMPANY + "C300,王五,C100,1,1,1,1\n" + f'C301,"{"長" * 1_000_000}",,1,1,1,1\n'
    )
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert "MCP_DATABASE_URL" not in said and "cannot open" not in said
    assert said.splitlines() == [
        "error: import refused, nothing written:",
        f"{export}: line 6: a cell longer than 131,072 characters (a quote left open, or not "
        "the HR export?); nothing after it was read",
    ]
    assert people(db_url) == {}


def test_an_expiry_out_of_range_is_said_as_such_not_blamed_on_the_database(db_url):
    """`--expires-in 99999999999d` overflowed a date and was reported as "MCP_DATABASE_URL:
    cannot open the leave database"."""
    for duration in ("99999999999d", "3651d", "999999w"):
        status, said = cli(db_url, "issue-token", "E001", "--expires-in", duration)
        assert (status, said.strip()) == (
            2,
            f"error: issue-token: --expires-in: '{duration}' is longer than 3650 days; leave "
            "--expires-in out for a token that never expires",
        )
    assert cli(db_url, "issue-token", "E001", "--expires-in", "3650d")[0] == 0


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("1e20", "line 5: 特休 balance 1e20 is more than 366 days, more than any leave balance "
                 "holds (days, not hours?)"),
        ("1e308", "line 5: 特休 balance 1e308 is more than 366 days"),
        ("1e309", "line 5: 特休 balance 1e309 is more than 366 days"),
        ("367", "line 5: 特休 balance 367 is more than 366 days"),
        ("nan", "line 5: 特休 balance 'nan' is no number of days"),
        ("inf", "line 5: 特休 balance 'inf' is no number of days"),
        ("-Infinity", "line 5: 特休 balance '-Infinity' is no number of days"),
    ],
)  # fmt: skip
def test_a_balance_no_leave_balance_could_be_is_refused_for_what_it_is(
    tmp_path, db_url, cell, problem
):
    """1e20 and 1e308 were taken (and get_leave_balance then wrote Infinity, which is not
    JSON); nan, inf and 1e309 were refused as "negative"."""
    export = tmp_path / "people.csv"
    export.write_text(COMPANY + f"C300,王五,C100,{cell},1,1,1\n")
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert said.splitlines()[1].startswith(problem), said
    assert "negative" not in said
    assert people(db_url) == {}
    export.write_text(COMPANY + "C300,王五,C100,366,1,1,1\n")  # the bound itself is taken
    assert cli(db_url, "import", str(export))[0] == 0


async def test_the_balance_tool_never_writes_a_number_json_has_not(database, connect):
    """A balance stored before imports were bounded (1e308 days: inf hours) is an error the
    log explains, not `"remaining_hours": Infinity`, which no JSON parser takes."""
    with database.write() as s:
        s.get(Balance, ("E001", "特休")).remaining_days = 1e308

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in a tool's JSON")

    async with connect("E001") as client:
        result = await client.call_tool("get_leave_balance", {})
        assert result.is_error
        assert result.structured_content["error"]["code"] == "internal_error"
        assert "Infinity" not in result.content[0].text
    async with connect("E002") as client:  # an ordinary balance is answered as ever
        result = await client.call_tool("get_leave_balance", {})
        assert not result.is_error
        json.loads(result.content[0].text, parse_constant=no_constants)


def test_every_problem_in_a_file_is_reported_at_once(tmp_path, db_url):
    """A negative balance hid the unknown manager, the cycle and the other bad row: they came
    out only once it was fixed, one round after another."""
    export = tmp_path / "people.csv"
    export.write_text(
        COMPANY
        + "C300,王五,C100,-1,1,1,1\n"  # line 5
        + "C301,趙六,C999,1,1,1,1\n"  # line 6: unknown manager
        + "C302,錢七,C303,1,1,1,1\nC303,孫八,C302,1,1,1,1\n"  # lines 7, 8: a cycle
        + "C304,,C100,1,1,1,1\n"  # line 9: no name
        + "C305,周九,C300,1,1,1,1\n"  # reports to the row with the bad balance: no problem
    )
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert said.splitlines() == [
        "error: import refused, nothing written:",
        "line 5: 特休 balance -1 is negative",
        "line 9: C304 has no name",
        "line 6: manager_id C999 of C301 is no employee (neither in the file nor in the leave "
        "database)",
        "line 7: managers form a cycle: C302 → C303 → C302",
        "line 8: managers form a cycle: C303 → C302 → C303",
    ]
    assert people(db_url) == {}


def test_a_long_chain_of_managers_is_imported_whole(tmp_path, db_url):
    """Each employee is walked once when the managers are checked (the check walked every
    chain from every employee), and written in batches with managers set last."""
    rows = "".join(f"C{n},員工{n},{f'C{n - 1}' if n else ''},1,1,1,1\n" for n in range(3000))
    export = tmp_path / "people.csv"
    export.write_text(HEADER + rows)
    status, said = cli(db_url, "import", str(export))
    assert (status, said.splitlines()[-1]) == (
        0, "import: 3000 employee(s) created, 0 updated, 0 unchanged"
    )  # fmt: skip
    found = people(db_url)
    assert found["C2999"][1] == "C2998" and found["C0"][1] is None and len(found) == 3000


def test_a_row_identical_to_a_demo_employee_is_reported_as_taken_over(tmp_path, db_url):
    """It said "nothing to do" but made the demo employee the company's own (which
    remove-demo-data then keeps)."""
    export = tmp_path / "people.csv"
    export.write_text(HEADER + "M001,陳美玲,,,,,\n")  # as the seed has it, balances left
    said = cli(db_url, "import", str(export), "--dry-run")[1]
    assert said.splitlines() == [
        "~ M001: now the company's own (was demo data)",
        "import (dry run): 0 employee(s) would be created, 1 would be updated, 0 unchanged",
    ]
    said = cli(db_url, "import", str(export))[1]
    assert said.splitlines()[-1] == "import: 0 employee(s) created, 1 updated, 0 unchanged"
    said = cli(db_url, "import", str(export))[1]
    assert said.splitlines()[-1].endswith("1 unchanged — nothing to do")


def test_remove_demo_data_says_which_demo_manager_it_kept_and_who_reports_to_them(tmp_path, db_url):
    """It kept demo manager M001, to whom an imported employee reported, without a word."""
    export = tmp_path / "people.csv"
    export.write_text(HEADER + "C100,林大為,M001,15,30,14,0\nC101,黃淑芬,M001,1,1,1,1\n")
    assert cli(db_url, "import", str(export))[0] == 0
    status, said = cli(db_url, "remove-demo-data")
    assert status == 0
    assert said.splitlines() == [
        "removed 3 demo token(s) and 2 demo employee(s) (E001, E002)",
        "kept demo employee M001: C100, C101 report to them; import M001 from the HR export "
        "(it becomes the company's own) or give these employees another manager, then run "
        "remove-demo-data again",
    ]
    export.write_text(HEADER + "C100,林大為,,15,30,14,0\nC101,黃淑芬,,1,1,1,1\n")
    assert cli(db_url, "import", str(export))[0] == 0
    assert cli(db_url, "remove-demo-data") == (
        0, "removed 0 demo token(s) and 1 demo employee(s) (M001)\n"
    )  # fmt: skip


def emails(db_url: str) -> dict[str, str | None]:
    db = Database(db_url)
    try:
        with db.read() as s:
            return {e: email for e, email in s.execute(select(Employee.id, Employee.email))}
    finally:
        db.dispose()


def test_an_email_column_names_each_person_for_front_ends_in_lower_case(tmp_path, db_url):
    """The address a chat front end names a person by (docs/identity.md): stored in lower case,
    an empty cell leaves it as it is, and two people may swap theirs in one file."""
    export = tmp_path / "people.csv"
    export.write_text(
        HEADER.replace("\n", ",email\n")
        + "C100,林大為,,15,30,14,0,Da-Wei.Lin@Example.COM\nC200,黃淑芬,C100,12,30,14,1,\n"
    )
    status, said = cli(db_url, "import", str(export))
    assert status == 0, said
    assert (
        "+ C100 林大為: no manager; 特休 15, 病假 30, 事假 14, 補休 0; da-wei.lin@example.com"
        in said
    )
    assert (emails(db_url)["C100"], emails(db_url)["C200"]) == ("da-wei.lin@example.com", None)
    export.write_text(
        HEADER.replace("\n", ",email\n")
        + "C100,林大為,,15,30,14,0,shufen@example.com\nC200,黃淑芬,C100,12,30,14,1,"
        "da-wei.lin@example.com\n"
    )
    said = cli(db_url, "import", str(export))[1]
    assert "~ C100: email da-wei.lin@example.com → shufen@example.com" in said, said
    assert "~ C200: email — → da-wei.lin@example.com" in said
    found = emails(db_url)
    assert (found["C100"], found["C200"]) == ("shufen@example.com", "da-wei.lin@example.com")
    assert "nothing to do" in cli(db_url, "import", str(export))[1]


def test_an_email_that_would_be_two_peoples_or_is_none_is_refused(tmp_path, db_url):
    export = tmp_path / "people.csv"
    header = HEADER.replace("\n", ",email\n")
    export.write_text(
        header
        + "C100,林大為,,15,30,14,0,a@example.com\nC200,黃淑芬,C100,12,30,14,1,A@example.com\n"
        "C201,張志明,C200,7,28,14,0,not-an-address\n"
        "C202,陳小芳,C200,7,28,14,0,xiaoming.wang@example.com\n"
    )
    status, said = cli(db_url, "import", str(export))
    assert status == 2
    assert "line 3: email a@example.com is on line 2 too" in said
    assert "line 4: email 'not-an-address' is no email address" in said
    # a demo employee the file leaves alone keeps theirs
    assert "line 5: email xiaoming.wang@example.com is E001's in the leave database" in said
    assert "C100" not in emails(db_url)
