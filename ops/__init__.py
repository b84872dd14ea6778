"""What a site runs: make up's preflight, replica layout and readiness check, the compose files
read through Compose, the podman route, the model's identity, the Kubernetes overlays rendered
and checked (ops.k8s), and our services as local processes (the release gate's scratch stack).
It imports neither devtools/ nor harness/ (tests/test_layout.py)."""
