"""The MCP server's stores schedule themselves (issue 32): what the serving process calls is a
store's async face (LeaveStore, IdentityStore), whose public methods are coroutines that choose
where they run (see mcp_server.storage.AsyncStore). No caller wraps a store call: outside
storage.py no module of the server hands work to a thread, and outside the store modules none
reaches past a face, to its scheduling or to the sync store behind it.

Read from the source with ast, never by running it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from mcp_server.identity import IdentityStore
from mcp_server.leaves import LeaveStore
from tests.support import REPO_ROOT

SERVER = Path(REPO_ROOT) / "mcp_server"
# AsyncStore: the one place that hands a store call to a thread
SCHEDULER = "storage.py"
# the sync stores and their async faces
STORES = ("storage.py", "leaves.py", "identity.py")
FACES = (LeaveStore, IdentityStore)

HAND_OFFS = {"to_thread", "run_sync", "run_in_executor"}
# what only a face itself uses: its scheduling, and the sync store it wraps
PAST_A_FACE = {"_read", "_on_thread", "sync"}


def wrapped_store_calls(source: str, *, store_module: bool = False) -> list[str]:
    """Each place (line: name) where `source` hands work to a thread itself, or, unless it is a
    store module, reaches past a store's async face."""
    forbidden = HAND_OFFS if store_module else HAND_OFFS | PAST_A_FACE
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Import):
            names = [part for alias in node.names for part in alias.name.split(".")]
        elif isinstance(node, ast.ImportFrom):
            modules = (node.module or "").split(".")
            names = [*modules, *(alias.name for alias in node.names)]
        found += [f"{getattr(node, 'lineno', 0)}: {name}" for name in names if name in forbidden]
    return sorted(set(found))


def test_no_module_of_the_server_but_storage_hands_a_store_call_to_a_thread():
    offences = {
        path.name: found
        for path in sorted(SERVER.rglob("*.py"))
        if path.name != SCHEDULER
        and (
            found := wrapped_store_calls(
                path.read_text(encoding="utf-8"), store_module=path.name in STORES
            )
        )
    }
    assert offences == {}


def test_the_check_finds_each_way_back_to_wrapping_a_store_call():
    def found(source: str) -> list[str]:
        return [entry.split(": ", 1)[1] for entry in wrapped_store_calls(source)]

    assert "to_thread" in found("import anyio.to_thread")
    assert "to_thread" in found("from anyio import to_thread")
    assert "to_thread" in found("import asyncio\nasyncio.to_thread(f)")
    assert "run_sync" in found("await anyio.to_thread.run_sync(lambda: service.search(a, k, s))")
    assert "run_in_executor" in found("await loop.run_in_executor(None, service.balance, a)")
    assert "_read" in found("await service._read(partial(service.sync.search, a, k, s))")
    assert "sync" in found("view = context.service.sync.check_cancellable(a, leave_id)")
    assert found("leaves = await context.service.search(actor(), keyword, status)") == []
    # a store module makes its own calls through its face's scheduling and sync store
    wrapping = "await self._read(partial(self.sync.search, a, k, s))"
    assert wrapped_store_calls(wrapping, store_module=True) == []
    handing_off = "await anyio.to_thread.run_sync(work)"
    assert wrapped_store_calls(handing_off, store_module=True) == ["1: run_sync", "1: to_thread"]


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.__name__)
def test_every_public_method_of_a_stores_async_face_is_a_coroutine(face):
    public = {
        name: method
        for name, method in inspect.getmembers(face, inspect.isfunction)
        if not name.startswith("_")
    }
    assert public
    assert [
        name for name, method in public.items() if not inspect.iscoroutinefunction(method)
    ] == []
