"""What people see of data a job carries, of the secrets a command was given, and of EchoMQ's types.

Whatever a job holds (its id, payload, error, traceback, result, group) and whatever a raw
command left in the keyspace reaches an operator's terminal, log and browser. Nothing of it
may act there: no byte of it is a terminal's command (ESC, CR, a bidi override), a log's line
break, or markup. Every place that prints it goes through this module (pure, no I/O):

* :func:`one_line` -- free text (an error, a name) on one line, every character that is not
  printable escaped (``\\n``, ``\\x1b``, ``\\u202e``); bytes that are not UTF-8 as ``\\xNN``.
* :func:`lines` -- the same, keeping its line breaks (a traceback, a pretty-printed payload).
* :func:`id_form` -- a job id as it is shown and named again: :func:`one_line`'s escapes with
  ``\\\\`` for a backslash, so :func:`from_id_form` gives the very id back (``emq remove
  --escaped``, the dashboard's links and forms).
* :func:`quoted` -- an id in a log line: its id form between double quotes.
* :func:`clip` -- a long text cut for a list (escaped when shown, as any other).
* :func:`redact_url` -- a node's URL with its password replaced by ``***``.
* :func:`type_name` -- a type in a message: EchoMQ's by the public name users import it under.

Ids read from the server are text with Python's surrogate escapes (PEP 383) for bytes that are
not UTF-8 (:func:`echomq._protocol.verbs.text`), and the clients encode them back the same way: so an id
another client wrote as raw bytes is listed, shown as ``\\xNN`` and acted on like any other.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

#: the short escapes; every other character that is not printable is \\xNN, \\uNNNN or \\UNNNNNNNN
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_ID_ESCAPE = re.compile(r"\\(?:(?P<named>[\\tnr])|x(?P<byte>[0-9a-fA-F]{2})|u(?P<u4>[0-9a-fA-F]{4})"
                        r"|U(?P<u8>[0-9a-fA-F]{8})|(?P<bad>.?))", re.S)
_UNESCAPED = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
#: a shown text's bound where a list shows many (the dashboard's job list, ``emq dead``): the whole
#: text is one click or ``emq inspect`` away
LISTED_CHARS = 200


def _escape(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, carried as a surrogate escape
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (``str.isprintable``: control
    characters, ESC, line breaks, tabs, bidi and other format characters, surrogates) escaped."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def lines(text: str) -> str:
    """:func:`one_line` for each line of ``text``: its line feeds kept, every other character that
    is not printable (a carriage return among them) escaped."""
    return "\n".join(one_line(line) for line in text.split("\n"))


def clip(text: str, limit: int = LISTED_CHARS) -> str:
    """At most ``limit`` characters of ``text``, and ``…`` when it was longer (a list's error)."""
    return text if len(text) <= limit else text[:limit] + "…"


def id_form(job_id: str) -> str:
    """A job id as shown, and as :func:`from_id_form` reads it back: printable characters as they
    are, a backslash as ``\\\\``, every other character escaped as by :func:`one_line`."""
    if job_id.isprintable() and "\\" not in job_id:
        return job_id
    return "".join("\\\\" if char == "\\" else char if char.isprintable() else _escape(char) for char in job_id)


def from_id_form(text: str) -> str:
    """The id :func:`id_form` showed as ``text``: ``\\\\``, ``\\t``, ``\\n``, ``\\r``, ``\\xNN``
    (one byte), ``\\uNNNN`` and ``\\UNNNNNNNN`` (one character) read back. Raises ValueError,
    naming the escape, for a backslash followed by anything else."""
    if "\\" not in text:
        return text
    data = bytearray()
    at = 0
    for match in _ID_ESCAPE.finditer(text):
        data += text[at : match.start()].encode("utf-8", "surrogateescape")
        at = match.end()
        if match["named"]:
            data += _UNESCAPED[match["named"]].encode()
        elif match["byte"]:
            data.append(int(match["byte"], 16))
        elif match["u4"] or match["u8"]:
            code = int(match["u4"] or match["u8"], 16)
            if code > 0x10FFFF:
                raise ValueError(f"{match[0]!r} names no character (the last is \\U0010ffff)")
            data += chr(code).encode("utf-8", "surrogatepass")
        else:
            raise ValueError(f"{match[0]!r} is not an escape of an id's form: write a backslash as \\\\, and "
                             "use \\t \\n \\r, \\xNN for a byte, \\uNNNN or \\UNNNNNNNN for a character")
    data += text[at:].encode("utf-8", "surrogateescape")
    return data.decode("utf-8", "surrogateescape")


def quoted(job_id: str) -> str:
    """An id in a log line: its :func:`id_form` between double quotes, so no id can end the line
    or pass for the text around it."""
    return f'"{id_form(job_id)}"'


#: a URL's ``user:password@``, up to its last ``@`` before a query (a password may hold ``@`` or ``/``)
_PASSWORD = re.compile(r"(?<=://)([^/@:?#]*):[^?#]*@")
#: a ``password=`` query argument (valkey-py reads every query argument as a client option)
_PASSWORD_ARGUMENT = re.compile(r"([?&]password=)[^&#]*")


def redact_url(url: str) -> str:
    """``url`` with its password (the userinfo's, or a ``password=`` query argument) shown as ``***``;
    a URL without one comes back unchanged."""
    return _PASSWORD_ARGUMENT.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))


#: EchoMQ's public classes by the name users import them under: the public modules record theirs
#: as they load (:func:`publish`), since where a class is defined is internal and may move
_PUBLIC_NAMES: dict[type, str] = {}


def publish(module: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Record the classes among ``names`` (a public module's ``__all__``) as ``module.name`` for
    :func:`type_name`; a class two public modules export keeps the first name recorded."""
    for name in names:
        if isinstance(value := namespace[name], type):
            _PUBLIC_NAMES.setdefault(value, f"{module}.{name}")


def type_name(kind: type) -> str:
    """A type as a message names it: an EchoMQ class by its public name (``echomq.Connection``, not
    the module that defines it), any other by its module and name (``builtins.dict``)."""
    return _PUBLIC_NAMES.get(kind) or f"{kind.__module__}.{kind.__qualname__}"
