"""Load tests (Locust) and the self-host vs API cost calculator (README: "Load tests and cost")."""
