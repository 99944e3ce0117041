"""Typed Python clients for the two sides of the worker, sync and asyncio.

- The API server's side (:class:`FrontendClient`, :class:`AsyncFrontendClient`) binds the address
  the workers send text to, sends tokenize requests and aborts, and reads each request's replies
  as an iterator (``for reply in request``, ``async for reply in request``).
- The scheduler's side (:class:`BackendClient`, :class:`AsyncBackendClient`) binds the address the
  workers send token ids to, reads each tokenized request (:class:`UserMsg`) and each abort
  (:class:`AbortBackendMsg`), and sends generated ids (:class:`DetokenizeMsg`, the first one of a
  request with its :class:`Opening`, the last one with its finish reason).

Both route through a :class:`~puredetok.worker.WorkerPool` (a request's messages always
reach the worker that holds it). The failure model, request by request (docs/worker.md):

- an error reply that ends a request raises :class:`RequestError` from its iterator (an error that
  does not end it, such as invalid ids skipped, comes as a reply with ``error`` set);
- a worker that restarted (a :class:`ReadyMsg` from its address with another ``instance``) lost the
  requests it held: each raises :class:`RequestLost` at once;
- no reply for ``timeout`` seconds: :class:`RequestTimeout` (and an abort is sent, so that the
  worker and the scheduler let the request go); a request never hangs;
- a worker that stops hands its requests back (:attr:`UserReply.state`): with ``on_hand_back``,
  the client gives each :class:`HandBack` to it (the scheduler re-opens the request on a worker
  with :meth:`BackendClient.reopen`) and the request's iterator goes on as if nothing happened;
  without, the request raises :class:`RequestHandedBack`, which carries the hand-back.
"""

from __future__ import annotations

from puredetok.client._backend import AsyncBackendClient, BackendClient
from puredetok.client._common import (
    DEFAULT_TIMEOUT,
    HandBack,
    RequestError,
    RequestHandedBack,
    RequestLost,
    RequestTimeout,
)
from puredetok.client._frontend import AsyncFrontendClient, AsyncRequest, FrontendClient, Request

__all__ = [
    "DEFAULT_TIMEOUT",
    "HandBack",
    "RequestError",
    "RequestTimeout",
    "RequestLost",
    "RequestHandedBack",
    "FrontendClient",
    "AsyncFrontendClient",
    "Request",
    "AsyncRequest",
    "BackendClient",
    "AsyncBackendClient",
]

for _public in (
    AsyncBackendClient,
    AsyncFrontendClient,
    AsyncRequest,
    BackendClient,
    FrontendClient,
    HandBack,
    Request,
    RequestError,
    RequestHandedBack,
    RequestLost,
    RequestTimeout,
):
    _public.__module__ = __name__  # a pickle names the public path, never the private module
