"""Payload serializers: the core stores opaque bytes; the API turns objects into them."""

from __future__ import annotations

import json
import re
import sys
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Callable, Iterable, Protocol

from ..errors import PayloadError


class Serializer(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


_TOO_DEEP = ("the JSON is nested deeper than Python's JSON reads (its recursion limit, "
             f"{sys.getrecursionlimit()}): flatten it")
#: a surrogate's escape in JSON text, not itself escaped (an even run of backslashes before it)
_SURROGATE_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u(d[89ab][0-9a-f]{2}(?:\\ud[c-f][0-9a-f]{2})?|d[c-f][0-9a-f]{2})",
                               re.I)


def _refuse_lone_surrogates(data: bytes) -> None:
    """Raise ValueError when JSON text escapes a surrogate that is not half of a pair."""
    for match in _SURROGATE_ESCAPE.finditer(data):
        if len(match[1]) != 10:
            raise ValueError(f"a string holds a lone surrogate (\\u{match[1][:4].decode()}), which no UTF-8 text "
                             "holds and strict JSON readers refuse: encode the bytes it stands for (base64, say)")


#: first bytes no BOM and no UTF-16/32 text starts with
_PRINTABLE_ASCII = frozenset(bytes([b]) for b in range(0x21, 0x7F))


class JSONSerializer:
    """The default: compact, standard JSON, UTF-8. NaN and Infinity are refused both ways:
    other JSON readers (and JSON.parse) cannot read them; so is a lone surrogate (no UTF-8 holds
    one, and strict readers refuse its escape), and a value nested past Python's recursion limit
    (a ValueError naming it, not a RecursionError). One encoder and one decoder serve every call
    (``json.dumps``/``loads`` with options build a new one each time: a few µs a job)."""

    _encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    _decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    #: the C encoder the encoder builds for each call, built once and without the markers of its
    #: cycle check (a third of a small payload's encode, enqueue_many's most): a cycle recurses to
    #: a RecursionError, and the encoder itself then says which it was
    _chunks: Callable[[Any, int], Iterable[str]] = (
        c_make_encoder(None, _encoder.default, encode_basestring_ascii, None, ":", ",", False, False, False)
        if c_make_encoder is not None else _encoder.iterencode)  # type: ignore[assignment]

    def dumps(self, obj: Any) -> bytes:
        if obj is None:  # what a handler that returns nothing leaves as its result: every such job's
            return b"null"
        try:
            data = "".join(self._chunks(obj, 0)).encode()
        except RecursionError:
            try:
                data = self._encoder.encode(obj).encode()  # a cycle: ValueError("Circular reference detected")
            except RecursionError:
                raise ValueError(_TOO_DEEP) from None
        if b"\\ud" in data:  # a surrogate's escape: a pair (a character past U+FFFF) is fine, a lone one is not
            _refuse_lone_surrogates(data)
        return data

    def loads(self, data: bytes | str) -> Any:
        try:
            if type(data) is bytes and data[:1] in _PRINTABLE_ASCII and data[1:2] != b"\0":
                # what json.detect_encoding reads as UTF-8 without a BOM (any JSON this encoder wrote):
                # decoded without its checks (the worker decodes every payload), by the decoder's own
                # scanner when the value fills the text (no whitespace to skip: it starts printable)
                text = data.decode("utf-8", "surrogatepass")
                try:
                    value, end = self._decoder.scan_once(text, 0)
                except StopIteration:
                    pass  # not a value: decode() raises its JSONDecodeError
                else:
                    if end == len(text):
                        return value
                return self._decoder.decode(text)  # whitespace after it, or more than one value
            if isinstance(data, (bytes, bytearray)):
                data = data.decode(json.detect_encoding(data), "surrogatepass")  # as json.loads reads bytes
            if not isinstance(data, str) or data.startswith("\ufeff"):
                return json.loads(data, parse_constant=_refuse_constant)  # json.loads' own refusals
            return self._decoder.decode(data)
        except RecursionError:
            raise ValueError(_TOO_DEEP) from None


class RawSerializer:
    """Bytes in, bytes out: for payloads that are already encoded (or binary)."""

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, str):
            try:
                return obj.encode()
            except UnicodeEncodeError as exc:
                raise ValueError(f"a lone surrogate ({obj[exc.start]!r}, at {exc.start}) is not text UTF-8 holds: "
                                 "give the bytes") from None
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"RawSerializer takes bytes or str payloads, not {type(obj).__name__}")
        return bytes(obj)

    def loads(self, data: bytes) -> bytes:
        return data


def encode(serializer: "Serializer", value: Any, max_bytes: int | None, *, what: str, limit: str, hint: str = ""
           ) -> bytes:
    """``value`` as the bytes stored for it (a payload, a result), refused with :class:`PayloadError`
    when the serializer cannot encode it or it is over ``max_bytes`` (the ``limit`` setting)."""
    try:
        data = serializer.dumps(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"the {what} cannot be encoded by {type(serializer).__name__}: {exc}") from exc
    if max_bytes is not None and len(data) > max_bytes:
        raise PayloadError(f"the {what} is {len(data)} bytes, over the limit of {max_bytes} ({limit}){hint}",
                           size=len(data))
    return data


JSON = JSONSerializer()
RAW = RawSerializer()
