"""The loop's HTTP routes, one module per concern; `loop.app.create_app` assembles them."""
