"""What only the tests and benchmarks run: nothing a site runs (ops/, evals/, the services)
imports it (tests/test_layout.py)."""
