"""``--api-key``: which requests carry the key. One check for the single server's
middleware (``app.py``) and the Ray router's own ``/metrics`` (``ray_app.py``), so both
accept the key the same ways and leave the same path open."""
from __future__ import annotations

import secrets
from typing import List, Mapping, Tuple

from .openai_format import error_body

OPEN_PATHS = ("/health",)   # answered without the key: a load balancer's probe


def authorized(headers: Mapping[str, str], path: str, api_key: str) -> bool:
    """Whether a request to ``path`` with ``headers`` (names lower-case, as Starlette's
    ``Headers`` looks them up) may be answered: ``path`` is open, or it carries
    ``api_key`` as ``x-api-key: KEY`` or ``Authorization: Bearer KEY`` (compared in
    constant time)."""
    given = headers.get("x-api-key") or ""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        given = given or token.strip()
    return path in OPEN_PATHS or secrets.compare_digest(given, api_key)


def unauthorized_body() -> dict:
    """The 401 body (OpenAI's error shape) of a request without the key."""
    return error_body("a valid API key is needed (Authorization: Bearer KEY or x-api-key: KEY)",
                      "invalid_request_error", code="invalid_api_key")


def key_headers(api_key) -> List[Tuple[str, str]]:
    """The headers that carry ``api_key`` (none for None): what an in-process caller of
    the application sends (a Ray replica reading its own ``/metrics``)."""
    return [] if api_key is None else [("authorization", f"Bearer {api_key}")]
