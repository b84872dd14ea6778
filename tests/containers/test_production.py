"""A production `make up-sim` in real containers, used as a platform engineer would on day one:
from an empty database, the company's people imported from an HR export, a service token
issued and revoked, a person signed in through the identity provider, a backup restored, and
an alert delivered to the site's webhook.

Every step runs the command docs/operations.md gives (`compose exec -T mcp-server python -m
mcp_server … - < FILE`, `compose run --rm -T … restore -`), and prints what it printed. The
identity provider's JWKS URL and the alert webhook are a small stand-in service the tier adds
with a site override, as a site adds its own (tests/containers/site_stub.py).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from ops.layout import LAYOUT_FILE
from ops.stackcheck import Stack, problems
from tests.support import free_port, wait_until

from .helpers import LOAD_FILE, SITE_OVERRIDE, Engine, env_file, make

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
ISSUER = "https://login.example.com/"
AUDIENCE = "http://mcp-server:8090/mcp"
KID = "site-key-1"
REJECTED_TOKEN_CACHE_SECONDS = 3
HEALTHZ = "http://127.0.0.1:8000/healthz"
PEOPLE = """employee_id,name,manager_id,特休,病假,事假,補休
P100,林經理,,15,30,14,0
P101,陳專員,P100,7,30,14,2
P102,王工程師,P100,10,30,14,0
"""
# line 3 names a manager nobody has
BAD_PEOPLE = "employee_id,name,manager_id,特休\nP200,甲,,3\nP201,乙,P999,3\n"


def private_ca_for(host: str, folder: Path) -> tuple[Path, Path, Path]:
    """A site's private CA and a certificate it signed for `host`: (CA, certificate, key) as
    PEM files anyone in a container can read."""
    now = dt.datetime.now(dt.UTC)

    def signed(subject: str, public: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = signed("site CA", ca_key.public_key(), "site CA", ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = signed(host, key.public_key(), "site CA", ca_key, False)
    files = {
        "ca.pem": ca.public_bytes(serialization.Encoding.PEM),
        "site.pem": certificate.public_bytes(serialization.Encoding.PEM),
        "site-key.pem": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o644)
    return folder / "ca.pem", folder / "site.pem", folder / "site-key.pem"


class ProductionStack:
    def __init__(self, engine: Engine, folder: Path) -> None:
        self.engine, self.folder = engine, folder
        self.loop_port, self.stub_port = free_port(), free_port()
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks = folder / "jwks.json"
        jwks.write_text(json.dumps({"keys": [{**public, "kid": KID, "use": "sig"}]}))
        self.env = env_file(
            folder,
            MCP_ENV="production",
            MCP_ELICITATION_STATE_KEY=secrets.token_hex(32),
            GRAFANA_ADMIN_PASSWORD=secrets.token_hex(16),
            ALERTMANAGER_WEBHOOK_URL="http://site-stub:8000/alerts",
            MCP_OIDC_ISSUER=ISSUER,
            MCP_OIDC_AUDIENCE=AUDIENCE,
            MCP_OIDC_JWKS_URL="https://site-stub:8443/jwks.json",
            LOOP_REJECTED_TOKEN_CACHE_SECONDS=str(REJECTED_TOKEN_CACHE_SECONDS),
            LOOP_PUBLISHED_PORT=str(self.loop_port),
            MCP_PUBLISHED_PORT=str(free_port()),
            PROMETHEUS_PUBLISHED_PORT=str(free_port()),
            ALERTMANAGER_PUBLISHED_PORT=str(free_port()),
            GRAFANA_PUBLISHED_PORT=str(free_port()),
            SIM_PROFILE="instant",
            VLLM_GPUS="1",
        )
        self.site = self._site_override(jwks)
        self.files = f"COMPOSE_FILES={SITE_OVERRIDE} {self.site}"
        extra = (LAYOUT_FILE, REPO / SITE_OVERRIDE, self.site)
        self.stack = Stack(
            sim=True, env_file=self.env, extra_files=extra, environ=engine.env, engine="podman"
        )

    def _site_override(self, jwks: Path) -> Path:
        bundle_image = self.compose_config()["services"]["loop"]["image"]
        stub = REPO / "tests" / "containers" / "site_stub.py"
        ca, certificate, key = private_ca_for("site-stub", self.folder)
        tls = ["/stub/site.pem", "/stub/site-key.pem"]
        override = {
            "services": {
                "site-stub": {
                    "image": bundle_image,
                    "command": ["python", "/stub/site_stub.py", "/stub/jwks.json", *tls],
                    "volumes": [
                        f"{stub}:/stub/site_stub.py:ro",
                        f"{jwks}:/stub/jwks.json:ro",
                        f"{certificate}:{tls[0]}:ro",
                        f"{key}:{tls[1]}:ro",
                    ],
                    "ports": [f"127.0.0.1:{self.stub_port}:8000"],
                    "networks": ["backend", "frontend"],
                    "healthcheck": {
                        "test": ["CMD", "python", "-m", "common.healthprobe", HEALTHZ],
                        "interval": "5s",
                    },
                },
                # the MCP server fetches the keys when it starts, over https from a provider
                # whose certificate the site's own CA signed (docs/operations.md: SSL_CERT_FILE)
                "mcp-server": {
                    "depends_on": {"site-stub": {"condition": "service_healthy"}},
                    "volumes": [f"{ca}:/site/ca.pem:ro"],
                    "environment": {"SSL_CERT_FILE": "/site/ca.pem"},
                },
            }
        }
        path = self.folder / "compose.site.yaml"
        path.write_text(json.dumps(override))  # JSON is YAML
        return path

    def compose_config(self) -> dict[str, Any]:
        from ops import compose

        return compose.config(sim=True, env_file=self.env, environ=self.engine.env)

    @property
    def loop_url(self) -> str:
        return f"http://127.0.0.1:{self.loop_port}"

    def compose(self, *args: str, timeout: float = 180) -> tuple[int, str]:
        done = self.stack.run(*args, timeout=timeout)
        return done.returncode, (done.stdout + done.stderr).strip()

    def admin(
        self, *args: str, stdin: Path | None = None, stdout: Path | None = None
    ) -> tuple[int, str]:
        """`compose exec -T mcp-server python -m mcp_server …`, as docs/operations.md runs it,
        with standard input from a file or standard output to one: (status, what it said)."""
        return self.piped("exec", "-T", "mcp-server", "python", "-m", "mcp_server", *args,
                          stdin=stdin, stdout=stdout)  # fmt: skip

    def piped(
        self, *args: str, stdin: Path | None = None, stdout: Path | None = None
    ) -> tuple[int, str]:
        with ExitStack() as files:
            source = files.enter_context(stdin.open("rb")) if stdin else subprocess.DEVNULL
            sink = files.enter_context(stdout.open("wb")) if stdout else subprocess.PIPE
            done = subprocess.run(self.stack.command(*args), stdin=source, stdout=sink,
                                  stderr=subprocess.PIPE, cwd=REPO, env=self.engine.env,
                                  timeout=180)  # fmt: skip
        printed = (done.stdout or b"") + done.stderr
        return done.returncode, printed.decode(errors="replace").strip()

    def up(self) -> str:
        done = make(self.engine, "up-sim", f"ENV_FILE={self.env}", self.files, "SIM_UP_TIMEOUT=180")
        output = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, f"make up-sim failed:\n{output}"
        return done.stdout + done.stderr

    def down(self) -> None:
        make(self.engine, "down", f"ENV_FILE={self.env}", self.files)
        self.compose("-f", str(LOAD_FILE), "--profile", "load", "down", "--volumes")

    def signed_in(self, employee_id: str) -> dict[str, str]:
        """A person's access token as the company's identity provider would sign it."""
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 600, "nbf": now - 5,
                  "employee_id": employee_id}  # fmt: skip
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})
        return {"Authorization": f"Bearer {token}"}

    def run(self, text: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(
            f"{self.loop_url}/v1/runs", json={"input": text}, headers=headers, timeout=120
        )

    def own_leaves(self, headers: dict[str, str]) -> dict[str, str]:
        """{reason: employee} of the leaves a search through the loop shows this person."""
        run = self.run("查一下我的假單", headers)
        assert run.status_code == 200, run.text
        (search,) = [step for step in run.json()["steps"] if step["name"] == "search_leaves"]
        return {leave["reason"]: leave["employee_id"] for leave in search["result"]["leaves"]}


def said(what: str, status: int, output: str) -> None:
    print(f"\n$ {what}  → exit {status}")
    for line in output.splitlines():
        print(f"    {line}")


@pytest.fixture(scope="module")
def production(engine: Engine, tmp_path_factory, timings) -> Iterator[ProductionStack]:
    up = ProductionStack(engine, tmp_path_factory.mktemp("production"))
    started = time.monotonic()
    try:
        output = up.up()
        timings["production make up-sim"] = time.monotonic() - started
        said("make up-sim (MCP_ENV=production)", 0, output[-1200:])
        assert "MCP_ENV=development" not in output  # no laptop warning on a production box
        assert "alerts are shown at Alertmanager's port and sent to nobody" not in output
        yield up
    finally:
        up.down()


def test_an_empty_database_gets_the_schema_and_no_demo_data(production):
    status, seeded = production.compose("logs", "mcp-seed")
    said("compose logs mcp-seed", status, seeded)
    assert "no demo data" in seeded
    status, tokens = production.admin("list-tokens")
    said("mcp_server list-tokens", status, tokens)
    assert status == 0 and "demo" not in tokens


def test_the_hr_export_is_imported_once_and_a_bad_one_writes_nothing(production):
    export, bad = production.folder / "people.csv", production.folder / "bad.csv"
    export.write_text(PEOPLE, encoding="utf-8")
    bad.write_text(BAD_PEOPLE, encoding="utf-8")
    export.chmod(0o600)  # as an HR export with people's data should be kept
    status, output = production.admin("import", "--dry-run", "-", stdin=export)
    said("mcp_server import --dry-run - < people.csv", status, output)
    assert status == 0 and "3 employee(s) would be created" in output
    status, output = production.admin("import", "-", stdin=export)
    said("mcp_server import - < people.csv", status, output)
    assert status == 0 and "3 employee(s) created" in output
    status, output = production.admin("import", "-", stdin=export)
    said("mcp_server import - < people.csv  (again)", status, output)
    assert status == 0 and "nothing to do" in output
    status, output = production.admin("import", "-", stdin=bad)
    said("mcp_server import - < bad.csv", status, output)
    assert status == 2 and "line 3" in output and "P999" in output
    status, output = production.admin("import", "--dry-run", "-", stdin=export)
    assert "0 would be updated, 3 unchanged" in output  # P200, the good row, was not written


def test_a_signed_in_person_reaches_their_own_leaves_and_no_one_elses(production):
    created = production.run(
        "幫我請特休 2027-01-04 到 2027-01-05 事由：家族聚會", production.signed_in("P102")
    )
    assert created.status_code == 200, created.text
    print(f"\nP102 (signed in by the identity provider): {created.json()['answer']}")
    assert created.json()["status"] == "completed", created.json()
    assert production.own_leaves(production.signed_in("P102")) == {"家族聚會": "P102"}
    assert production.own_leaves(production.signed_in("P101")) == {}
    now = int(time.time())
    foreign = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 600, "employee_id": "P102"},
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        algorithm="RS256",
        headers={"kid": KID},
    )
    refused = production.run("查一下我的假單", {"Authorization": f"Bearer {foreign}"})
    print(f"a token signed by another key: HTTP {refused.status_code}")
    assert refused.status_code == 401


def test_a_revoked_service_token_stops_working_within_the_loops_cache_time(production):
    status, issued = production.admin("issue-token", "P101", "--expires-in", "1d",
                                      "--label", "payroll sync")  # fmt: skip
    said("mcp_server issue-token P101 --expires-in 1d --label 'payroll sync'", status, "(token)")
    assert status == 0
    token, note = issued.splitlines()[0], issued.splitlines()[-1]
    print(f"    {note}")
    token_id = next(word for word in note.split() if word.startswith("tok_"))
    headers = {"Authorization": f"Bearer {token}"}
    assert production.run("查一下我的假單", headers).status_code == 200
    status, listed = production.admin("list-tokens")
    said("mcp_server list-tokens", status, listed)
    assert token not in listed and "payroll sync" in listed
    status, output = production.admin("revoke-token", token_id)
    said(f"mcp_server revoke-token {token_id}", status, output)
    assert status == 0
    revoked_at = time.monotonic()
    wait_until(
        lambda: production.run("查一下我的假單", headers).status_code == 401,
        timeout=REJECTED_TOKEN_CACHE_SECONDS + 30,
        what="the loop refusing the revoked token",
    )
    print(f"the loop refused the revoked token {time.monotonic() - revoked_at:.1f} s after it")


def test_a_backup_restores_every_change_made_before_it_and_none_after(production):
    person = production.signed_in("P102")
    saved = production.folder / "leave-before.backup"
    status, output = production.admin("backup", "-", stdout=saved)
    said("mcp_server backup - > leave-before.backup", status, output)
    assert status == 0 and saved.stat().st_size > 0, output
    late = production.run("幫我請事假 2027-02-01 到 2027-02-01 事由：備份之後", person)
    assert late.json()["status"] == "completed", late.json()
    assert set(production.own_leaves(person)) == {"家族聚會", "備份之後"}

    status, output = production.compose("stop", "mcp-server", "loop")
    said("compose stop mcp-server loop", status, output)
    assert status == 0, output
    try:
        # a backup kept private (0600) and copied in with `compose cp` is root's in the container:
        # the service's user cannot read it, and is told so
        saved.chmod(0o600)
        status, output = production.compose("cp", str(saved), "mcp-server:/data/restore.backup")
        assert status == 0, output
        restore = ("run", "--rm", "-T", "--no-deps", "mcp-server", "python", "-m", "mcp_server",
                   "restore")  # fmt: skip
        status, output = production.piped(*restore, "/data/restore.backup")
        said("compose run … mcp_server restore /data/restore.backup  (copied in)", status, output)
        assert "restore: cannot read /data/restore.backup: Permission denied" in output
        status, output = production.piped(*restore, "-", stdin=saved)
        said("compose run --rm -T --no-deps mcp-server python -m mcp_server restore - < …", status,
             output)  # fmt: skip
        assert "restored the leave database from standard input" in output
    finally:  # the later tests need the services, whatever happened here
        status, output = production.compose("start", "mcp-server", "loop")
        said("compose start mcp-server loop", status, output)
    assert status == 0, output
    wait_until(lambda: problems(production.stack) == {}, timeout=120, what="the stack ready")
    assert production.own_leaves(person) == {"家族聚會": "P102"}
    print("after the restore P102 has 家族聚會 (before the backup), not 備份之後 (after it)")


def test_a_fired_alert_reaches_the_sites_webhook(production):
    stub = f"http://127.0.0.1:{production.stub_port}/alerts"
    before = len(httpx.get(stub, timeout=5).json())
    run = production.run(
        "查一下我的假單 [sim-fault:tool_call_as_text]", production.signed_in("P101")
    )
    assert run.status_code == 200, run.text
    sent = time.monotonic()

    def delivered() -> list[dict[str, Any]]:
        return [
            alert
            for payload in httpx.get(stub, timeout=5).json()[before:]
            for alert in payload["alerts"]
            if alert["labels"]["alertname"] == "ToolCallWrittenAsText"
        ]

    wait_until(lambda: bool(delivered()), timeout=120, what="ToolCallWrittenAsText at the webhook")
    (alert, *_) = delivered()
    print(f"\nthe webhook received {alert['labels']['alertname']} ({alert['status']}) "
          f"{time.monotonic() - sent:.0f} s after the run: {alert['annotations']['summary']}")  # fmt: skip
    assert alert["status"] == "firing" and alert["labels"]["severity"] == "critical"


def test_the_production_stack_is_healthy_after_all_of_it(production):
    assert problems(production.stack) == {}
