from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import loop_service, mcp_server, model_simulator

from .helpers import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory, new_database_url) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("loopstack")
    mcp_db_url = new_database_url(workdir, "leave")
    with (
        mcp_server(workdir, mcp_db_url) as mcp,
        model_simulator(
            workdir, profile="instant", retry_after_seconds="1", stall_seconds="5"
        ) as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            confirmation_timeout_seconds="1.5",
            model_timeout_seconds="1",
            model_max_retries="1",
            model_retry_backoff_seconds="0.05",
        ) as (loop, store_url),
    ):
        yield Stack(loop, f"{mcp}/mcp", f"{sim}/v1", store_url, mcp_db_url, workdir)
