"""The one SSE writer and reader (common/sse.py), against each other and against streams cut
and spelled the ways servers send them."""

from __future__ import annotations

from common import sse


def test_what_the_writer_frames_the_reader_reads_back_whole():
    payloads = [({"answer": "已取消假單", "n": 1}, "run.finished"), ("two\nlines", None)]
    wire = b"".join(sse.frame(data, event) for data, event in payloads) + sse.DONE_FRAME
    assert "已取消假單".encode() in wire  # UTF-8 as it is, not \\u escapes
    parser = sse.Parser()
    # however the bytes are cut on the way
    got = [event for i in range(len(wire)) for event in parser.feed(wire[i : i + 1])]
    assert [(e.event, e.data) for e in got] == [
        ("run.finished", '{"answer": "已取消假單", "n": 1}'),
        ("message", "two\nlines"),
        ("message", sse.DONE),
    ]
    assert got[0].json() == {"answer": "已取消假單", "n": 1}


def test_compact_frames_have_no_spaces_as_vllms_chunks():
    assert sse.frame({"a": [1, 2]}, compact=True) == b'data: {"a":[1,2]}\n\n'


def test_lines_with_crlf_comments_and_an_unfinished_last_event():
    lines = ["event: tool.started", 'data: {"x": 1}', "", ": keep-alive", "", "data: cut off"]
    assert [(e.event, e.json()) for e in sse.events(lines)] == [("tool.started", {"x": 1})]
    parser = sse.Parser()
    assert [e.data for e in parser.feed(b"event: a\r\ndata: 1\r\n\r\n")] == ["1"]
