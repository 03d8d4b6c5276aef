"""asyncio for the publisher: :class:`AsyncClient` awaits what
:class:`~storybus_client.Client` does on its own threads.

The retry discipline, the story order and the outbox are the synchronous
client's, unchanged; only the waiting is asynchronous, so an event loop is
never blocked by a publish or its retries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .client import Client, PublishResult, ResendResult
from .message import Message
from .trace import TraceContext

__all__ = ["AsyncClient"]


class AsyncClient:
    """Publishes from asyncio code. It takes the arguments of
    :class:`~storybus_client.Client`, or wraps one (``client=``); use it
    with ``async with``, or await :meth:`aclose`."""

    def __init__(self, *args: Any, client: Client | None = None, **kwargs: Any) -> None:
        if client is not None and (args or kwargs):
            raise TypeError("give either a client or the arguments of one")
        self._client = client if client is not None else Client(*args, **kwargs)

    @property
    def client(self) -> Client:
        """The synchronous client that does the work."""
        return self._client

    async def publish(
        self,
        message: Message,
        *,
        trace: TraceContext | None = None,
        sandbox_answer: str | None = None,
        timeout: float | None = None,
    ) -> PublishResult:
        """Publishes ``message`` as :meth:`Client.publish` does, and returns
        its final success or raises its error. Messages of one story are sent
        in the order their publish calls were made."""
        future = self._client.send(message, trace=trace, sandbox_answer=sandbox_answer, timeout=timeout)
        return await asyncio.wrap_future(future)

    async def resend(self) -> list[ResendResult]:
        """Resends the outbox as :meth:`Client.resend` does."""
        return await asyncio.to_thread(self._client.resend)

    async def aclose(self) -> None:
        """Waits for the messages being sent, then stops the client."""
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
