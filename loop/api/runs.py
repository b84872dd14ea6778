"""The runs API: start a run (JSON or Server-Sent Events), list and read runs, cancel one,
answer its confirmations."""

import functools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jsonschema
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from mcp.types import ElicitResult
from pydantic import BaseModel, Field, StrictBool

from common import sse
from common.runs_protocol import (
    EVENT_SCHEMA,
    ConfirmAction,
    ConfirmMode,
    Run,
    RunEvent,
    RunFinished,
    RunList,
)

from ..runs import (
    ActiveRun,
    ConfirmationAlreadyAnswered,
    PendingConfirmation,
    RunIdInUse,
    RunManager,
    RunNotRecorded,
    UnknownConfirmation,
    accept_content,
)
from .auth import Authenticated, manager_of
from .bodies import UnicodeJSONRoute
from .errors import AUTH_ERRORS, errors
from .forward import HolderUnreachable, forward, holder_of

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=UnicodeJSONRoute)

SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
MAX_INPUT_CHARS = 4000  # one request to the agent (the facade's last user message too)
RUN_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,40}$"


class RunRequest(BaseModel):
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS, description="The user's request.")
    session_id: str | None = Field(
        None, pattern=SESSION_ID_PATTERN, description="Continue this conversation."
    )
    stream: StrictBool = Field(False, description="Server-Sent Events as the run happens.")
    confirm: ConfirmMode | None = Field(
        None,
        description="How confirmations are answered: ask the client (SSE event), or answer every "
        "one automatically. Default: ask when streaming, decline otherwise.",
    )
    run_id: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="Your own id for this run (e.g. a UUID), so you know it before any answer "
        "arrives: GET /v1/runs/{run_id} finds it, and POSTing the same run_id again returns "
        "that run (waiting for it to finish) instead of starting another.",
    )


# What an MCP elicitation's answer can carry (mcp.types.ElicitResult.content): a flat object of
# primitive values, which must also fit the schema the confirmation asked with.
ElicitContent = dict[str, str | int | float | bool | list[str] | None]


class ConfirmationAnswer(BaseModel):
    action: ConfirmAction
    content: ElicitContent | None = Field(
        None,
        description="With accept: the answer to the confirmation's `schema` (from "
        'confirmation.requested), e.g. {"confirm": true}; left out, every boolean field is '
        "true and the rest take their defaults.",
    )


class ConfirmationAnswered(BaseModel):
    status: Literal["answered"]
    action: ConfirmAction


@router.post(
    "",
    response_model=Run,
    responses={200: {"content": {"text/event-stream": {}}}, **errors(409, *AUTH_ERRORS)},
)
async def create_run(body: RunRequest, user: Authenticated, request: Request) -> Response:
    """Run the agent on one request. With `stream: true` the answer is a stream of
    Server-Sent Events: run.started, model.started/finished, tool.started/finished,
    confirmation.requested/resolved, answer.delta, detection, run.finished.
    With `run_id`, a retry after a lost connection returns the same run."""
    manager = manager_of(request)
    confirm = body.confirm or ("ask" if body.stream else "decline")
    try:
        run = await manager.start(
            user.token,
            body.input,
            session_id=body.session_id,
            confirm=confirm,
            stream=body.stream,
            run_id=body.run_id,
        )
    except RunIdInUse:
        final = await _earlier_run(manager, str(body.run_id), user.key, body.stream)
        if not body.stream:
            return _json(final)
        return StreamingResponse(_sse_once(final), media_type="text/event-stream")
    if not body.stream:
        return _json(await _outcome(run))
    return StreamingResponse(_sse(manager, run), media_type="text/event-stream")


@router.get("", response_model=RunList, responses=errors(*AUTH_ERRORS))
async def list_runs(
    user: Authenticated,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=100, description="How many, newest first.")] = 20,
) -> Response:
    """The caller's recent runs (running ones included): how a client that lost its
    connection finds the run it started."""
    return _json(RunList.model_construct(runs=await manager_of(request).recent(user.key, limit)))


@router.get("/{run_id}", response_model=Run, responses=errors(404, *AUTH_ERRORS))
async def get_run(run_id: str, user: Authenticated, request: Request) -> Response:
    """The run as it stands: while it runs, what it has not done yet is null."""
    manager = manager_of(request)
    record = await manager.record(run_id, user.key)
    if record is None:
        raise HTTPException(404, "no such run")
    if record.status == "running":
        # its open questions are in the memory of the loop that holds it: ask that loop
        holder = await holder_of(request, manager, run_id, user.key)
        if holder is not None:
            try:
                return await forward(request, holder, manager.instance_id)
            except HolderUnreachable:
                pass  # the run as its holder last saved it
    return _json(record)


@router.post("/{run_id}/cancel", response_model=Run, responses=errors(404, *AUTH_ERRORS))
async def cancel_run(run_id: str, user: Authenticated, request: Request) -> Response:
    manager = manager_of(request)
    run = manager.active.get(run_id)
    if run is None:
        holder = await holder_of(request, manager, run_id, user.key)
        if holder is not None:
            return await _relayed(request, holder)
    if run is None or run.user_key != user.key or not manager.cancel(run_id, user.key, user.token):
        raise HTTPException(404, "no such running run")
    return _json(await _outcome(run))


@dataclass(frozen=True)
class HeldElsewhere:
    """The run is another live loop's: the request goes there."""

    url: str


async def pending_confirmation(
    run_id: str, confirmation_id: str, user: Authenticated, request: Request
) -> PendingConfirmation | HeldElsewhere:
    """The caller's confirmation being answered (or the loop that holds its run); 404 before
    the answer is even read."""
    manager = manager_of(request)
    run = manager.active.get(run_id)
    pending = run.confirmations.get(confirmation_id) if run and run.user_key == user.key else None
    if pending is not None:
        return pending
    holder = await holder_of(request, manager, run_id, user.key)
    if holder is None:
        raise HTTPException(404, "no such pending confirmation")
    return HeldElsewhere(holder)


async def _relayed(request: Request, holder: str) -> Response:
    try:
        return await forward(request, holder, manager_of(request).instance_id)
    except HolderUnreachable:
        raise HTTPException(
            503, "the loop holding this run did not answer; try again", {"Retry-After": "1"}
        ) from None


@router.post(
    "/{run_id}/confirmations/{confirmation_id}",
    response_model=ConfirmationAnswered,
    responses=errors(404, 409, *AUTH_ERRORS),
)
async def answer_confirmation(
    run_id: str,
    confirmation_id: str,
    body: ConfirmationAnswer,
    user: Authenticated,
    pending: Annotated[PendingConfirmation | HeldElsewhere, Depends(pending_confirmation)],
    request: Request,
) -> dict[str, str] | Response:
    if isinstance(pending, HeldElsewhere):
        return await _relayed(request, pending.url)
    content = None
    if body.action == "accept":
        content = accept_content(pending.schema) if body.content is None else body.content
        _check_content(pending.schema, content)
    try:
        manager_of(request).answer_confirmation(
            run_id,
            user.key,
            confirmation_id,
            ElicitResult(action=body.action, content=content),
            token=user.token,
        )
    except UnknownConfirmation:
        raise HTTPException(404, "no such pending confirmation") from None
    except ConfirmationAlreadyAnswered:
        raise HTTPException(409, "this confirmation was already answered") from None
    return {"status": "answered", "action": body.action}


def _check_content(schema: dict[str, Any], content: dict[str, Any]) -> None:
    """422, as for any other invalid body, for content the confirmation's schema refuses (the
    MCP server would refuse it too, and the question would be spent); it stays open."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:  # a schema that is not one: not ours to judge, the MCP server will
        return
    refusals = [
        {
            "type": "confirmation_content",
            "loc": ("body", "content", *error.absolute_path),
            "msg": error.message,
            "input": error.instance,
        }
        for error in validator.iter_errors(content)
    ]
    if refusals:
        raise RequestValidationError(refusals)


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> jsonschema.Draft202012Validator | None:
    """A validator per schema: checking the schema itself costs about 2 ms, and every
    confirmation of one tool asks with the same schema."""
    schema = json.loads(schema_json)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return jsonschema.Draft202012Validator(schema)


async def _earlier_run(manager: RunManager, run_id: str, user_key: str, stream: bool) -> Run:
    """The final result of the run a retry names; 409 when it is not the caller's to have."""
    active = manager.active.get(run_id)
    if active is not None and active.user_key == user_key and active.task is not None:
        if stream:  # its events already go to the first request; two readers would split them
            raise HTTPException(409, f"run {run_id} is running; follow it at /v1/runs/{run_id}")
        return await _outcome(active)
    record = await manager.record(run_id, user_key)
    if record is None or record.status == "running":
        raise HTTPException(409, f"run_id {run_id} is taken")
    return record


async def _outcome(run: ActiveRun) -> Run:
    try:
        return await run.outcome()
    except RunNotRecorded:
        raise HTTPException(503, RunNotRecorded.message) from None


def _json(model: BaseModel) -> Response:
    """The model's JSON as it is (FastAPI would validate our own values again first)."""
    return Response(model.model_dump_json(), media_type="application/json")


async def _sse_once(final: Run) -> AsyncIterator[bytes]:
    yield _frame(RunFinished.of(final))


async def _sse(manager: RunManager, run: ActiveRun) -> AsyncIterator[bytes]:
    async for event in manager.events(run):
        yield _frame(event)


def _frame(event: RunEvent) -> bytes:
    return sse.frame(event.data(), event.event)


def document_events(document: dict[str, Any]) -> None:
    """The stream's events in the OpenAPI document: each event's model among its schemas, and
    the stream's answer as one of them by name (FastAPI lists JSON answers only)."""
    stream = EVENT_SCHEMA.json_schema(
        ref_template="#/components/schemas/{model}", mode="serialization"
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in stream.pop("$defs", {}).items():
        schemas.setdefault(name, schema)  # the models FastAPI lists already stay as they are
    stream["description"] = (
        "One Server-Sent Event each: `event:` the name (the `event` field), `data:` the other "
        "fields as JSON. A client skips an event it does not know."
    )
    answer = document["paths"]["/v1/runs"]["post"]["responses"]["200"]
    answer["content"]["text/event-stream"] = {"schema": stream}
