"""Deployment helpers: the compose files read through Compose, the no-Docker stack, the demo."""
