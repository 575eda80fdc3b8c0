"""An asyncio web service that enqueues jobs without blocking its event loop.

Plain asyncio, no framework: ``POST /signup`` with a JSON body ``{"email": ...}`` enqueues a
welcome email and answers 202 with the job's id; ``GET /stats`` answers the queue's counts.
Every request shares one :func:`echomq.aio.connect` connection (its pool holds at most
``max_connections`` sockets), and every call is awaited, so a slow server never stalls the
other requests. A worker (``emq worker web_service:app``) sends the emails.

    python docs/examples/web_service.py --url redis://127.0.0.1:6379 --port 8080
    curl -X POST localhost:8080/signup -d '{"email": "ada@example.com"}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict

import echomq
from echomq import aio

app = echomq.App("web")


@app.task(queue="welcome-emails", max_attempts=5)
async def send_welcome(payload: dict[str, str], ctx: echomq.JobContext) -> None:
    """The worker side: send the email (here: record it as a follow-up job's payload)."""
    await ctx.producer("sent-emails").enqueue({"to": payload["email"]}, id=ctx.idempotency_key)


class Service:
    """The HTTP side: one asyncio connection, one producer per queue, shared by every request."""

    def __init__(self, connection: aio.Connection) -> None:
        self.emails = aio.Queue(connection, "welcome-emails")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, body = await read_request(reader)
            status, answer = await self.route(method, path, body)
        except (ValueError, KeyError) as exc:
            status, answer = 400, {"error": str(exc)}
        except echomq.EchoMQError as exc:
            status, answer = 503, {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(answer).encode()
        writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def route(self, method: str, path: str, body: bytes) -> tuple[int, dict]:
        if (method, path) == ("POST", "/signup"):
            email = json.loads(body)["email"]
            if not isinstance(email, str) or "@" not in email:
                raise ValueError(f"bad email {email!r}")
            job = await self.emails.enqueue({"email": email})
            return 202, {"job": job.id}
        if (method, path) == ("GET", "/stats"):
            return 200, asdict(await self.emails.counts())
        return 404, {"error": f"no route {method} {path}"}


REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    length = int(headers.get("Content-Length", headers.get("content-length", "0")))
    return method, path, await reader.readexactly(length) if length else b""


async def serve(url: str, wire: int | str = "auto", host: str = "127.0.0.1", port: int = 8080,
                max_connections: int = 20) -> tuple[asyncio.Server, aio.Connection]:
    connection = await aio.connect(url, wire=wire, max_connections=max_connections)
    service = Service(connection)
    return await asyncio.start_server(service.handle, host, port), connection


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server, connection = await serve(args.url, port=args.port)
    async with connection, server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
