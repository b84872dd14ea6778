"""What a developer of the bundle runs: the local stack without Docker (make dev, make stop),
the demo and its load sweep, the real-vLLM tier's preparation, and the generators that rewrite
the files repeating the settings classes and monitoring/. Nothing a site runs imports it
(tests/test_layout.py)."""
