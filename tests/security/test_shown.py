"""The pure parts of issue 43's operator side: how job data is escaped for people (echomq._protocol.shown),
a URL redacted, a payload refused, a token judged, a list row read, a directory's shadowing
files named. No server: each decision is a function of its input (docs/guarantees.md, sections 16-21)."""

from __future__ import annotations

import pytest

from echomq.worker.loading import shadowing
from echomq._core.core import encode_payload
from echomq.dashboard.auth import MAX_DELAY_S, check_token, refusal_delay_s, same_origin
from echomq.errors import ConfigurationError, PayloadError
from echomq.admin.inventory import LISTED_FIELDS, listed_view
from echomq._protocol.keys import check_job_id
from echomq._protocol.serializers import JSON, RAW
from echomq._protocol.shown import LISTED_CHARS, clip, from_id_form, id_form, lines, one_line, quoted, redact_url
from echomq._protocol.verbs import text

#: ids as the server may hold them (a raw command wrote them), read as echomq reads them
HOSTILE_IDS = [
    "plain-id", "a\nb", "a\r\nb", "tab\there", "\x1b[2J\x1b]0;owned\x07", "[/x]", "[link=https://evil.example]x[/link]",
    "C:\\path\\n", "bidi\u202egnp.exe", "line\u2028sep", "é漢字", "\x85next", "\U000e0001tag",
    text(b"\xff\xfe not utf-8"), text(b"half \xe2\x82"), "\\", "\\\\x41",
]


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_an_id_shown_is_one_printable_line_and_reads_back_as_the_same_id(job_id):
    shown = id_form(job_id)
    assert shown.isprintable()  # no control character, no line break, no surrogate, no bidi override
    assert from_id_form(shown) == job_id
    assert one_line(job_id).isprintable() and quoted(job_id) == f'"{shown}"'


def test_the_escapes_people_read():
    assert id_form("plain-id") == "plain-id" and id_form("é漢字") == "é漢字"  # nothing to escape: as it is
    assert id_form("a\r\nb") == "a\\r\\nb" and id_form("\x1b[2J") == "\\x1b[2J"
    assert id_form(text(b"\xff")) == "\\xff"  # a byte that is not UTF-8
    assert id_form("\u202e") == "\\u202e" and id_form("\x85") == "\\u0085"  # characters, not bytes
    assert id_form("C:\\path") == "C:\\\\path"  # a backslash doubled: the form reads back unambiguously
    assert one_line("C:\\path\n") == "C:\\path\\n"  # free text keeps its backslashes
    assert lines("Traceback:\n  File \x1b[31m\r") == "Traceback:\n  File \\x1b[31m\\r"  # line feeds kept


@pytest.mark.parametrize("bad", ["\\q", "end\\", "\\x4", "\\u12", "\\U00110000"])
def test_a_bad_escape_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="escape|character"):
        from_id_form(bad)


def test_an_id_holding_bytes_that_are_not_utf8_is_an_id_and_a_lone_surrogate_is_refused():
    assert check_job_id(text(b"\xff\xfe")) == "\udcff\udcfe"
    with pytest.raises(ConfigurationError, match="lone surrogate"):
        check_job_id("a\ud800")


def test_clip_cuts_a_long_text_for_a_list():
    assert clip("x" * LISTED_CHARS) == "x" * LISTED_CHARS
    assert clip("x" * (LISTED_CHARS + 1)) == "x" * LISTED_CHARS + "…"


@pytest.mark.parametrize("url,shown", [
    ("redis://:s3cret@db:6379/0", "redis://:***@db:6379/0"),
    ("rediss://app:s3cret@db:6380", "rediss://app:***@db:6380"),
    ("redis://app:p@ss/w0rd@db:6379", "redis://app:***@db:6379"),  # a password holding @ and /
    ("redis://db:6379?password=s3cret&db=1", "redis://db:6379?password=***&db=1"),
    ("unix:///run/valkey.sock?password=s3cret", "unix:///run/valkey.sock?password=***"),
    ("redis://db:6379/0", "redis://db:6379/0"),  # no password: unchanged
    ("redis://app@db:6379", "redis://app@db:6379"),
])
def test_a_url_is_shown_without_its_password(url, shown):
    assert redact_url(url) == shown and "s3cret" not in redact_url(url)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("payload,says", [
    ("\ud800", "lone surrogate"), ({"k": ["ok", "\udcff"]}, "lone surrogate"),
    (nested(100_000), "nested deeper"),
])
def test_a_payload_json_cannot_carry_is_refused_clearly(payload, says):
    with pytest.raises(PayloadError, match=says):
        encode_payload(JSON, payload, None)


def test_what_json_can_carry_still_goes():
    assert JSON.loads(encode_payload(JSON, "a \U0001F600 \\ud800 b", None)) == "a \U0001F600 \\ud800 b"
    with pytest.raises(ValueError, match="nested deeper"):
        JSON.loads(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(PayloadError, match="lone surrogate"):
        encode_payload(RAW, "\ud800", None)


def test_a_token_must_be_16_characters_and_not_whitespace():
    check_token(None)
    check_token("x" * 16)
    for bad, says in (("x" * 15, "15 characters"), (" " * 20, "all whitespace"), ("\t\n" * 9, "all whitespace")):
        with pytest.raises(ConfigurationError, match=says):
            check_token(bad)


def test_each_wrong_token_in_a_row_waits_longer_up_to_a_bound():
    delays = [refusal_delay_s(n) for n in range(1, 12)]
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert all(later >= earlier for earlier, later in zip(delays, delays[1:])) and delays[-1] == MAX_DELAY_S
    assert refusal_delay_s(10_000) == MAX_DELAY_S


@pytest.mark.parametrize("origin,host,same", [
    (None, "127.0.0.1:8080", True),  # not a browser: the form secret guards it
    ("http://127.0.0.1:8080", "127.0.0.1:8080", True), ("https://Dash.example:443", "dash.example:443", True),
    ("https://evil.example", "127.0.0.1:8080", False), ("null", "127.0.0.1:8080", False),
    ("http://127.0.0.1:8081", "127.0.0.1:8080", False), ("http://127.0.0.1:8080", None, False),
])
def test_a_post_must_come_from_the_dashboard_s_own_origin(origin, host, same):
    assert same_origin(origin, host) is same


def test_a_list_row_is_read_from_its_listed_fields_and_its_error_clipped():
    values = [b"dead", b"3", b"3", None, None, b"E" * 5000, None, None, None, None, None, None, b"1700000000000",
              None, None]
    assert len(values) == len(LISTED_FIELDS)
    assert not {"payload", "traceback", "progress"} & set(LISTED_FIELDS)
    view = listed_view("q", "id-1", values, 0.0, 1700000001000, "dead")
    assert view is not None and view.listed and view.payload is None
    assert view.fields["last_error"] == "E" * LISTED_CHARS + "…"
    assert "payload" not in view.as_dict() and view.as_dict()["attempts"] == 3
    assert listed_view("q", "gone", [None] * len(LISTED_FIELDS), None, 0, "dead") is None


def test_files_named_as_standard_library_modules_are_found():
    assert shadowing(["queue.py", "json", "myapp.py", "notes.txt", "README", "random.pyc", "jobs"]) == \
        ["json", "queue.py"]
