"""The cost calculator: self-hosted GPUs vs a commercial API, from a load test's capacity at the
SLO (docs/loadtest.md, "Cost calculator").

settings + presets → inputs (summary.json, prompt tokens) → maths → calculate → report, chart;
`python -m loadtest.cost` runs them in that order.
"""
