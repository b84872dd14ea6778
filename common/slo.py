"""The service level the bundle is held to: one set of numbers for the load tests' verdicts,
the alerts and the dashboards' SLO lines (a test holds monitoring/'s rules and dashboards to
these). A site that promises something else changes it here, and the load tests' LOAD_SLO_*
settings for a one-off run.

The figures are the common ones for an interactive assistant: GuideLLM's chat SLO (time to
first token ≤ 200 ms at p99, inter-token latency ≤ 50 ms at p99) for the model, and a whole
agent run within 5 s for 95 % of runs — its working time: the time a person takes to answer
a confirmation question is theirs, not the service's, and is left out (the loop's
leave_loop_run_working_seconds; the load test's run_ms, wall time less the client's wait).
"""

from __future__ import annotations

TTFT_P99_SECONDS = 0.200
ITL_P99_SECONDS = 0.050
RUN_P95_SECONDS = 5.0
MAX_ERROR_RATIO = 0.0  # of a load test's requests; the alerts allow a little more (below)
# The alerts fire on a sustained breach, not on one slow minute.
BREACH_FOR = "5m"
