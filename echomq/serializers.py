"""Payload serializers: the core stores opaque bytes; the API turns objects into them."""

from __future__ import annotations

import json
from typing import Any, Protocol


class Serializer(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class JSONSerializer:
    """The default: compact JSON, UTF-8."""

    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


class RawSerializer:
    """Bytes in, bytes out: for payloads that are already encoded (or binary)."""

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, str):
            return obj.encode()
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"RawSerializer takes bytes or str payloads, not {type(obj).__name__}")
        return bytes(obj)

    def loads(self, data: bytes) -> bytes:
        return data


JSON = JSONSerializer()
RAW = RawSerializer()
