"""``metalrt serve``: an OpenAI-compatible HTTP server over the runner's continuous
batching (see docs/serving.md). ``app.create_app`` builds the ASGI application,
``engine_loop.EngineLoop`` the thread that owns the model; importing this package
alone does not import the web stack (the ``serve`` extra)."""
