"""`python -m ops promote|rollback` (`make promote CANDIDATE=…`, `make rollback`): put a new
fine-tune into the router's rotation and take the serving one out, or the reverse, without a
request lost (docs/evaluation.md#promote-and-rollback).

promote: check the candidate (it answers, it serves the name the loop asks for), gate it
(`python -m evals` against the serving model's baseline report), `/add_worker` it, take each
serving replica out of rotation (`/remove_worker`: vllm-router 0.1.17 has no other way to stop
new requests to a worker; the requests it already forwarded finish on their own connections),
wait until each has nothing running or waiting (its own `vllm:num_requests_*`), and write the
record of which model serves. rollback: the same from the record, back to the previous
replicas (gated when they were promoted). The replicas taken out keep running: stopping them
is the operator's, once the record says they drained.

Refusals (one line, exit 2, nothing changed): a candidate that does not answer or serves
another name, one already in rotation, a promote or rollback already running (the lock file),
rollback with no record, and a candidate the gate fails (exit 2 as well, the report named).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

RECORD = "serving.json"
LOCK = "promote.lock"
# Prometheus reads this (file_sd; monitoring/prometheus/prometheus.yml, job vllm-serving): the
# dashboards' "which fine-tune serves" panel is the `up` of these targets, by their labels.
TARGETS = "serving-targets.json"
# ...and this one is the vllm job's second list (the first is the layout's replicas): every
# replica a promote or rollback has put into or out of rotation, so that a candidate's metrics
# reach the dashboards too. A layout replica listed here has the same labels as there, and
# Prometheus takes the two for one target (deduplicated), not two scrapes.
REPLICAS = "replicas.json"
REPORTS = "reports"
DRAIN_TIMEOUT = 300.0  # seconds: a long agent turn on a busy GPU replica


class Refused(Exception):
    """A refusal in one line: nothing was changed."""


@dataclass(frozen=True)
class Replica:
    url: str  # as the router reaches it (its worker URL)
    model: str  # the served name
    revision: str  # which weights: vLLM's `root` in /v1/models, or what the operator named


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _say(line: str) -> None:
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S.%f}"[:-3] + f"  {line}", flush=True)


class Router:
    """vllm-router 0.1.17's worker API, as it really answers (tests/ops/test_promote.py)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def workers(self) -> list[str]:
        try:
            answer = httpx2.get(f"{self.url}/list_workers", timeout=self.timeout)
            answer.raise_for_status()
            return [str(u) for u in answer.json()["urls"]]
        except (httpx2.HTTPError, ValueError, KeyError) as error:
            raise Refused(
                f"the router at {self.url} does not answer /list_workers: {error}"
            ) from None

    def add(self, url: str) -> None:
        # It waits until the worker's /health answers (up to --worker-startup-timeout-secs),
        # so the candidate is checked first and the wait here is bounded.
        answer = httpx2.post(f"{self.url}/add_worker", params={"url": url}, timeout=120)
        if answer.status_code != 200:
            raise Refused(f"the router refused /add_worker {url}: {answer.text.strip()[:200]}")

    def remove(self, url: str) -> None:
        # It answers 200 for a URL it does not have, so the list is checked after.
        httpx2.post(f"{self.url}/remove_worker", params={"url": url}, timeout=self.timeout)
        if url in self.workers():
            raise Refused(f"the router still lists {url} after /remove_worker")


def identify(url: str, revision: str = "", timeout: float = 5.0) -> Replica:
    """What a replica serves, or Refused when it does not answer as vLLM does."""
    base = url.rstrip("/")
    try:
        httpx2.get(f"{base}/health", timeout=timeout).raise_for_status()
        models = httpx2.get(f"{base}/v1/models", timeout=timeout)
        models.raise_for_status()
        data = [m for m in models.json().get("data") or [] if isinstance(m, dict)]
    except (httpx2.HTTPError, ValueError, AttributeError) as error:
        raise Refused(
            f"{base} does not answer as a vLLM server: {str(error) or type(error).__name__}"
        ) from None
    if not data:
        raise Refused(f"{base} lists no model on /v1/models")
    first = data[0]
    return Replica(
        base, str(first.get("id")), revision or str(first.get("root") or first.get("id"))
    )


def in_flight(url: str, timeout: float = 2.0) -> float | None:
    """Requests running or waiting on a replica (its own metrics); None when it does not answer."""
    try:
        text = httpx2.get(f"{url.rstrip('/')}/metrics", timeout=timeout).text
    except httpx2.HTTPError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def drain(url: str, timeout: float) -> tuple[bool, float]:
    """Wait until a replica out of rotation has finished what it was given: (drained, peak)."""
    deadline = time.monotonic() + timeout
    peak = 0.0
    while True:
        count = in_flight(url)
        if count is None:  # gone: nothing can finish there any more
            return True, peak
        peak = max(peak, count)
        if count == 0:
            return True, peak
        if time.monotonic() > deadline:
            return False, peak
        time.sleep(0.2)


@contextmanager
def locked(state: Path) -> Iterator[None]:
    """One promote or rollback at a time: a lock file created exclusively, removed at the end."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / LOCK
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        holder = path.read_text().strip() if path.exists() else "unknown"
        raise Refused(
            f"another promote or rollback runs ({holder}); if none does, remove {path}"
        ) from None
    with os.fdopen(fd, "w") as file:
        file.write(f"pid {os.getpid()} on {socket.gethostname()} since {_now()}\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def write_atomic(path: Path, content: str) -> None:
    """Readers (the next rollback, Prometheus) see the old file or the new one, never half."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # Prometheus runs as another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_record(state: Path) -> dict[str, Any] | None:
    path = state / RECORD
    if not path.exists():
        return None
    try:
        record: dict[str, Any] = json.loads(path.read_text())
        record["serving"] = [Replica(**r) for r in record["serving"]]
        record["previous"] = [Replica(**r) for r in record["previous"]]
    except (ValueError, KeyError, TypeError) as error:
        raise Refused(f"{path} is not a record this command wrote: {error}") from None
    return record


def _write_record(state: Path, record: dict[str, Any]) -> None:
    plain = {
        **record,
        "serving": [asdict(r) for r in record["serving"]],
        "previous": [asdict(r) for r in record["previous"]],
    }
    write_atomic(state / RECORD, json.dumps(plain, indent=2, ensure_ascii=False) + "\n")
    targets = [
        {"targets": [urlsplit(r.url).netloc], "labels": {"model": r.model, "revision": r.revision}}
        for r in record["serving"]
    ]
    write_atomic(state / TARGETS, json.dumps(targets, indent=2) + "\n")
    known = json.loads((state / REPLICAS).read_text()) if (state / REPLICAS).exists() else []
    replicas = {group["targets"][0]: group for group in known}
    for replica in (*record["serving"], *record["previous"]):
        address = urlsplit(replica.url)
        group = {"targets": [address.netloc], "labels": {"replica": address.hostname or ""}}
        replicas.setdefault(address.netloc, group)
    write_atomic(state / REPLICAS, json.dumps(sorted(replicas.values(), key=str), indent=2) + "\n")


def run_gate(replica: Replica, baseline: Path | None, out: Path, extra: list[str]) -> int:
    """`python -m evals` against one replica (not the router: only it must be judged)."""
    command = [sys.executable, "-m", "evals", "--model-url", f"{replica.url}/v1",
               "--model", replica.model, "--out", str(out), *extra]  # fmt: skip
    if baseline is not None:
        command += ["--baseline", str(baseline)]
    done = subprocess.run(command, capture_output=True, text=True)
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("#")]
    _say(
        f"  gate exit {done.returncode}: {verdicts[0] if verdicts else done.stderr.strip()[-200:]}"
    )
    return done.returncode


@dataclass
class Options:
    router: str
    state: Path
    drain_timeout: float = DRAIN_TIMEOUT
    gate_args: tuple[str, ...] = ()


def promote(
    options: Options,
    candidate_url: str,
    *,
    revision: str = "",
    model: str = "",
    baseline: Path | None = None,
) -> dict[str, Any]:
    state, router = options.state, Router(options.router)
    candidate_url = candidate_url.rstrip("/")
    if baseline is not None and not baseline.is_file():
        raise Refused(f"--baseline {baseline}: no such report")
    with locked(state):
        serving_urls = router.workers()
        if not serving_urls:
            raise Refused(f"the router at {options.router} has no worker to replace")
        if candidate_url in serving_urls:
            raise Refused(f"{candidate_url} is already in the router's rotation")
        candidate = identify(candidate_url, revision)
        serving = [identify(url) for url in serving_urls]
        asked = model or serving[0].model
        if candidate.model != asked:
            raise Refused(
                f"{candidate_url} serves {candidate.model!r}, not {asked!r}, "
                "the name the loop asks for"
            )
        record = read_record(state)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        timeline: dict[str, Any] = {"started": _now()}
        if baseline is None and record and {r.url for r in record["serving"]} == set(serving_urls):
            baseline = state / record["report"]
        if baseline is None:
            # Nothing says how the serving model scores: gate it first, the same way. Its
            # report is the baseline even when it misses a floor (exit 1): the candidate must
            # then do no worse than what serves.
            _say(f"no baseline: gating the serving model at {serving[0].url} first")
            out = state / REPORTS / f"{stamp}-serving"
            if run_gate(serving[0], None, out, list(options.gate_args)) not in (0, 1):
                raise Refused(f"the gate could not run against the serving model (see {out})")
            baseline = out / "report.json"
        _say(f"gate: {candidate_url} ({candidate.revision}) against {baseline}")
        out = state / REPORTS / stamp
        verdict = run_gate(candidate, baseline, out, list(options.gate_args))
        timeline["gate"] = _now()
        if verdict != 0:
            raise Refused(
                f"{candidate_url} fails the release gate (exit {verdict}): {out}/report.md"
            )
        report = str((out / "report.json").relative_to(state))
        _switch(options, router, serving, [candidate], timeline)
        new = {
            "action": "promote",
            "serving": [candidate],
            "previous": serving,
            "report": report,
            "previous_report": str(baseline.relative_to(state))
            if baseline.is_relative_to(state)
            else str(baseline),
            "timeline": timeline,
        }
        timeline["record"] = _now()
        _write_record(state, new)
        _say(f"record: {state / RECORD}: {candidate.model} {candidate.revision} serves")
        return new


def rollback(options: Options) -> dict[str, Any]:
    state, router = options.state, Router(options.router)
    with locked(state):
        record = read_record(state)
        if record is None:
            raise Refused(f"no record in {state}: nothing was promoted here to roll back")
        if record["action"] != "promote":
            raise Refused(
                "the last step was a rollback: promote again (with the gate) to go forward"
            )
        serving_urls = router.workers()
        current: list[Replica] = record["serving"]
        if set(serving_urls) != {r.url for r in current}:
            raise Refused(
                f"the router serves {serving_urls}, not what the record says "
                f"({[r.url for r in current]}): changed by hand?"
            )
        back = []
        for old in record["previous"]:
            now = identify(old.url)  # it must still run and serve the same weights
            if (now.model, now.revision) != (old.model, old.revision):
                raise Refused(
                    f"{old.url} now serves {now.model} {now.revision}, not {old.model} "
                    f"{old.revision} as when it was taken out"
                )
            back.append(old)
        timeline: dict[str, Any] = {"started": _now()}
        _switch(options, router, current, back, timeline)
        new = {
            "action": "rollback",
            "serving": back,
            "previous": current,
            "report": record.get("previous_report", ""),
            "previous_report": record["report"],
            "timeline": timeline,
        }
        timeline["record"] = _now()
        _write_record(state, new)
        _say(f"record: {state / RECORD}: {back[0].model} {back[0].revision} serves again")
        return new


def _switch(
    options: Options,
    router: Router,
    out: list[Replica],
    into: list[Replica],
    timeline: dict[str, Any],
) -> None:
    """The new ones into rotation before any old one leaves it: the router never has none."""
    added: list[str] = []
    removed: list[str] = []
    try:
        for replica in into:
            router.add(replica.url)
            added.append(replica.url)
            _say(f"add: {replica.url} in rotation")
        timeline["add"] = _now()
        # what each old replica holds as it leaves: the removal may itself wait for some of it
        # (the router's call), so the count is read just before, not only after
        leaving = {replica.url: in_flight(replica.url) or 0.0 for replica in out}
        for replica in out:
            router.remove(replica.url)
            removed.append(replica.url)
            _say(f"remove: {replica.url} out of rotation (no new requests)")
    except (Refused, httpx2.HTTPError) as error:
        # Put the rotation back as it was, so that a refusal still means nothing changed.
        for url in removed:
            router.add(url)
        for url in added:
            router.remove(url)
        raise Refused(
            f"the router's rotation could not be switched, and was put back: {error}"
        ) from None
    timeline["remove"] = _now()
    drained: dict[str, Any] = {}
    for replica in out:
        done, peak = drain(replica.url, options.drain_timeout)
        at_removal = max(peak, leaving[replica.url])
        drained[replica.url] = {"drained": done, "in_flight_at_removal": at_removal, "at": _now()}
        _say(
            f"drain: {replica.url} "
            + (
                f"finished its {peak:g} request(s)"
                if done
                else f"still busy after {options.drain_timeout:g} s"
            )
        )
    timeline["drain"] = drained
