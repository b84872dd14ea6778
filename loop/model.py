"""The OpenAI-compatible model client: retries, timeouts, and streamed or whole replies."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import openai
from openai._streaming import ServerSentEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from opentelemetry.trace import Span

from common.tracing import inject_headers

from . import tracing
from .engine import ModelContextExceeded, ModelError, ModelReply
from .toolcall_text import content_of_tool_turn, could_open_tool_call

logger = logging.getLogger(__name__)
MAX_RETRY_AFTER_SECONDS = 30.0
# The request goes as the body we build, through the SDK's own request, errors and parsing:
# `chat.completions.create` would first walk every message and tool schema against its
# parameter types (a fifth to a quarter of a read run's CPU), which changes nothing here.
CHAT_COMPLETIONS = "/chat/completions"
STREAM_ENDED_EARLY = "the model's stream ended before its last chunk"
# The authentication `create` asks for: the API key as a bearer token.
BEARER: openai.RequestOptions = {"security": {"bearer_auth": True}}
# The conversation a model call belongs to, sent with it: vLLM's router hashes this header
# (consistent_hash) to pick a replica, so every turn of a session lands on the replica whose
# prefix cache holds the session's prompt. Set by the run for its task; never the user's token.
SESSION_HEADER = "x-session-id"
current_session: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_session", default=None
)


def _options() -> openai.RequestOptions:
    """The call's headers: the session (for the router) and the W3C trace context of the
    current `chat` span (for vLLM's own span: a child of it); neither when there is none."""
    session = current_session.get()
    headers = inject_headers({} if session is None else {SESSION_HEADER: session})
    return {**BEARER, "headers": headers} if headers else BEARER


class OpenAIChatModel:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff_seconds: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        stream: bool = False,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        # The SDK's own retries are off: ours count, log and honour Retry-After.
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )
        self.model = model
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.stream = stream
        self.on_retry = on_retry or (lambda _reason: None)
        self._context_window: int | None = None

    def limited(self, max_tokens: int) -> OpenAIChatModel:
        """The same client, writing at most `max_tokens` per call."""
        twin = object.__new__(OpenAIChatModel)
        twin.__dict__.update(self.__dict__)
        twin.max_tokens = max_tokens
        return twin

    def streaming(self) -> OpenAIChatModel:
        """The same client, asking for streamed replies (for runs that stream to a user)."""
        twin = object.__new__(OpenAIChatModel)
        twin.__dict__.update(self.__dict__)
        twin.stream = True
        return twin

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]] | None = None,
    ) -> ModelReply:
        with tracing.chat_span(
            self.model,
            str(self.client.base_url),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        ) as span:
            reply = await self._complete(messages, tools, on_text, span)
            tracing.chat_finished(span, reply)
            return reply

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]] | None,
        span: Span,
    ) -> ModelReply:
        attempt = 0
        while True:
            try:
                if self.stream:
                    return await self._streamed(messages, tools, on_text)
                return await self._whole(messages, tools)
            except (
                openai.RateLimitError,
                openai.InternalServerError,
                openai.APIConnectionError,
            ) as error:
                reason = _retry_reason(error)
                if attempt >= self.max_retries:
                    raise ModelError(f"{reason} after {attempt + 1} attempts") from error
                delay = _retry_after(error) or self.backoff_seconds * 2**attempt
                delay *= 1 + random.uniform(0, 0.1)  # spread retries of concurrent runs
                attempt += 1
                self.on_retry(reason)
                span.add_event("retry", {"error.type": reason, "leave_loop.attempt": attempt})
                logger.info("model call failed (%s); retry %d in %.2fs", reason, attempt, delay)
                await asyncio.sleep(delay)
            except openai.APIStatusError as error:  # 4xx: retrying will not help
                message = _message(error)
                if error.status_code == 400 and "maximum context length" in message:
                    raise ModelContextExceeded(f"the model says: {message}") from error
                raise ModelError(f"HTTP {error.status_code}: {message}") from error

    async def context_window(self) -> int | None:
        """The served model's context length, as vLLM lists it (`max_model_len` in
        /v1/models); None while the endpoint cannot say."""
        if self._context_window is None:
            try:
                page = await self.client.models.list()
            except openai.OpenAIError:
                return None  # ask again next time
            self._context_window = 0  # listed without a length: unknown for good
            for listed in page.data:
                size = (listed.model_extra or {}).get("max_model_len")
                if listed.id == self.model and isinstance(size, int):
                    self._context_window = size
        return self._context_window or None

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        if tools:
            request["tools"] = tools
        if self.max_tokens:
            request["max_tokens"] = self.max_tokens
        return request

    async def _whole(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        response = await self.client.post(
            CHAT_COMPLETIONS,
            body=self._request(messages, tools),
            cast_to=ChatCompletion,
            options=_options(),
        )
        if not response.choices:
            raise ModelError("the model returned no choices")
        choice = response.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        if message.get("tool_calls"):  # the same content a streamed turn keeps
            message["content"] = content_of_tool_turn(message.get("content") or "")
        usage = response.usage
        # The SDK builds its models unvalidated: a server that leaves this out gives None.
        finish_reason = cast(str | None, choice.finish_reason)
        return ModelReply(
            message=message,
            finish_reason=finish_reason or "stop",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            response_id=response.id or "",
            response_model=response.model or "",
        )

    async def _streamed(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]] | None,
    ) -> ModelReply:
        body = {**self._request(messages, tools), "stream": True}
        body["stream_options"] = {"include_usage": True}
        stream = await self.client.post(
            CHAT_COMPLETIONS,
            body=body,
            cast_to=ChatCompletion,
            options=_options(),
            stream=True,
            stream_cls=_ChunkStream,
        )
        turn = _StreamedTurn(on_text)
        try:
            async for chunk in stream:
                await turn.add(chunk)
        except openai.APIConnectionError as error:  # the connection broke off
            turn.retry_or_fail(str(error))
            raise
        if turn.finish_reason is None and not stream.done:
            # The body ended cleanly but neither a chunk nor [DONE] said the turn was over (a
            # proxy or a server that gave up): what came is part of a turn, never all of it.
            turn.retry_or_fail(STREAM_ENDED_EARLY)
            raise openai.APIConnectionError(
                message=STREAM_ENDED_EARLY, request=stream.response.request
            )
        return await turn.reply()

    async def close(self) -> None:
        await self.client.close()


class _ChunkStream(openai.AsyncStream[ChatCompletionChunk]):
    """The SDK's stream of chunks, noting whether the server ended it with [DONE] (the SDK
    stops at it as it stops at a body that just ends)."""

    done = False

    async def _iter_events(self) -> AsyncIterator[ServerSentEvent]:
        async for event in super()._iter_events():
            self.done = self.done or event.data.startswith("[DONE]")
            yield event


class _StreamedTurn:
    """A streamed model turn as its chunks arrive: the text (sent on to `on_text` as soon as
    it cannot be the start of a tool call written as text), the tool calls, the usage."""

    def __init__(self, on_text: Callable[[str], Awaitable[None]] | None) -> None:
        self.on_text = on_text
        self.content: list[str] = []
        self.held = 0  # content[held:] not yet sent: it may still turn out to be a tool call
        self.plain = False
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.prompt_tokens = self.completion_tokens = 0
        self.response_id = self.response_model = ""

    async def add(self, chunk: ChatCompletionChunk) -> None:
        self.response_id = chunk.id or self.response_id
        self.response_model = chunk.model or self.response_model
        if chunk.usage:
            self.prompt_tokens = chunk.usage.prompt_tokens
            self.completion_tokens = chunk.usage.completion_tokens
        if not chunk.choices:
            return
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.content:
            self.content.append(delta.content)
            if self.on_text is not None and not self.calls:
                if not self.plain and not could_open_tool_call("".join(self.content)):
                    self.plain = True  # the turn is text: send what was held, then stream on
                if self.plain:
                    await self.on_text("".join(self.content[self.held :]))
                    self.held = len(self.content)
        for part in delta.tool_calls or []:
            call = self.calls.setdefault(
                part.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if part.id:
                call["id"] = part.id
            if part.function and part.function.name:
                call["function"]["name"] += part.function.name
            if part.function and part.function.arguments:
                call["function"]["arguments"] += part.function.arguments
        if choice.finish_reason:
            self.finish_reason = choice.finish_reason

    def retry_or_fail(self, why: str) -> None:
        """For a stream that stopped midway: nothing of it is kept either way (no half turn is
        ever acted on). While none of its text has been sent on, the caller raises a connection
        error, which is retried; once some has, a retry would send it twice, so the model call
        fails here (the run ends failed, saying why)."""
        if self.held:
            raise ModelError(f"the model's stream stopped midway through its answer: {why}")

    async def reply(self) -> ModelReply:
        text = "".join(self.content)
        if self.calls:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content_of_tool_turn(text),
                "tool_calls": [self.calls[i] for i in sorted(self.calls)],
            }
        else:
            message = {"role": "assistant", "content": text}
            if self.on_text is not None and self.held < len(self.content):
                await self.on_text("".join(self.content[self.held :]))  # a text turn's held text
        return ModelReply(
            message,
            self.finish_reason or "stop",
            self.prompt_tokens,
            self.completion_tokens,
            self.response_id,
            self.response_model,
        )


def _retry_reason(error: Exception) -> str:
    if isinstance(error, openai.RateLimitError):
        return "http_429"
    if isinstance(error, openai.APITimeoutError):
        return "timeout"
    if isinstance(error, openai.APIConnectionError):
        return "connection_error"
    return f"http_{getattr(error, 'status_code', 500)}"


def _retry_after(error: Exception) -> float | None:
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return min(float(value), MAX_RETRY_AFTER_SECONDS) if value else None
    except ValueError:
        return None


def _message(error: openai.APIStatusError) -> str:
    body = error.body if isinstance(error.body, dict) else {}
    return str(body.get("message") or body.get("error", {}).get("message") or error.message)[:300]
