"""Load tests (Locust) and the self-host vs API cost calculator (docs/loadtest.md)."""
