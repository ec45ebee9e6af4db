"""Tolerant scanner of a top-level JSON array (or of the list under the one key of a JSON document, ``{"data":
[...]}``): splits it into items at record boundaries, so a broken item costs only itself, and counts the items
of a file in a pass that keeps no records (the ledger's count).

Rules where the file is broken (each keeps the damage inside the item where it happens):
- a string ends at its closing quote or at the end of its line (JSON strings cannot hold a raw newline);
- a bare word outside strings that JSON does not allow (a string that never closed has swapped what is inside
  and outside strings) ends the item at the first `}, {` after its start: that is where the next record began;
- an item ends at a comma or `]` at array level; a stray closer at array level stays in the item (so it fails);
- in an array whose items start on their own line, an opener at the first item's indentation, first on its
  line, while an item is still open and is not valid JSON up to there (an unclosed bracket) ends that item
  and starts the next one;
- whatever follows the array's closing `]` is one more item (its first TAIL characters; the rest of the file
  is not read); so is an item cut off by the end of the file. Empty items (`[]`, a trailing comma) are not.
Memory is bounded by the largest item, never the file. Bytes that are not UTF-8 are kept as surrogate escapes
(the caller quarantines that item). An item that is valid JSON is parsed on the spot by the json module's C
decoder (the fast path, and the tokenizer skips it); only a broken one is tokenised here.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import IO, Any

CHUNK = 1 << 20
TAIL = 4096  # characters kept of the text after the array
UNPARSED = object()  # the value of an item the fast path could not parse
# a string (ends at its quote, or before a newline / the end of the data), one structural char, or a bare word
_TOKEN = re.compile(r'"[^"\\\n]*(?:\\[^\n][^"\\\n]*)*"?|[\[\]{},]|[^\s"\[\]{},:]+')
# bare words valid JSON allows outside strings (json.loads also takes NaN and Infinity)
_LITERAL = re.compile(r"-?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|Infinity)|true|false|null|NaN")
_OBJECT_BOUNDARY = re.compile(r"\}\s*,\s*\{")
_AFTER_ITEM = re.compile(r"\s*([,\]])")
_SPACE = re.compile(r"[ \t\r\n]*")
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


def _indent(buf: str, start: int, end: int) -> int | None:
    """Column of the item's first character when it is the first thing on its line, else None."""
    body = buf[start:end]
    lead = len(body) - len(body.lstrip(_WS))
    nl = body.rfind("\n", 0, lead)
    return None if nl < 0 else lead - nl - 1


def _broken_by(buf: str, start: int, p: int) -> bool:
    """True when the item starting at `start` is not valid JSON up to position `p` (so an opener there is where
    the next item begins); False when it is valid, or when that cannot be told yet (the error is at the end)."""
    try:
        _DECODER.raw_decode(buf, _SPACE.match(buf, start).end())
    except json.JSONDecodeError as e:
        return e.pos <= p and e.pos < len(buf) - 1
    except (ValueError, RecursionError):
        return False
    return False


def split_array(stream: IO[bytes], chunk_size: int = CHUNK) -> Iterator[tuple[str, Any]]:
    """(text, value) of each item of the top-level array in `stream`, in order: the item's text (stripped) and
    its parsed value, or UNPARSED when it is not valid JSON as it stands."""
    for _, text, value in _split(stream, chunk_size):
        yield text, value


def split_keyed(stream: IO[bytes], chunk_size: int = CHUNK) -> Iterator[tuple[str, Any]]:
    """Like split_array, for the list under the one key of a document ``{"key": [...]}``: the document's opening
    ``{"key":`` and closing ``}`` are not items; any other text before or after the list is one broken item."""
    for kind, text, value in _split(stream, chunk_size):
        if not ((kind == "before" and _KEY_HEAD.fullmatch(text)) or (kind == "after" and text == "}")):
            yield text, value


_KEY_HEAD = re.compile(r'\{[ \t\r\n]*"(?:[^"\\]|\\.)*"[ \t\r\n]*:')


def _split(stream: IO[bytes], chunk_size: int) -> Iterator[tuple[str, str, Any]]:
    """(kind, text, value) of split_array's items; kind: 'item', 'before' (text before the array's '[') or
    'after' (text after its closing ']')."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    buf, pos, start = "", 0, 0  # unread text; where tokenising resumes; start of the open item
    depth, state = 0, "before"  # depth 1: at array level; state: before | array | after (the array)
    indent: int | None = None
    eof, first = False, True
    while not eof and state != "after":
        chunk = stream.read(max(chunk_size, len(buf)))  # an item longer than a chunk: amortised linear copying
        eof = not chunk
        text = decoder.decode(chunk, final=eof)
        if first and text:
            text, first = text.removeprefix("\ufeff"), False
        buf += text
        safe = len(buf) if eof else len(buf) - 2  # a token ending later could still grow
        while (m := _TOKEN.search(buf, pos)) is not None and m.end() <= safe:
            p, tok = m.start(), m.group()
            pos = m.end()
            if tok[:1] == '"':
                continue
            if state == "before":
                if tok == "[":
                    if buf[start:p].strip(_WS):
                        yield "before", buf[start:p].strip(_WS), UNPARSED  # text before the array
                    state, depth, start = "array", 1, p + 1
            elif tok in ("{", "["):
                if depth == 1 and not buf[start:p].strip(_WS):  # an item starts: try the fast path
                    if indent is None:
                        indent = _indent(buf, start, p + 1)
                    try:
                        value, end = _DECODER.raw_decode(buf, p)
                    except (ValueError, RecursionError):
                        value, end = UNPARSED, p
                    after = _AFTER_ITEM.match(buf, end) if value is not UNPARSED else None
                    if after is not None and after.end() <= safe:
                        yield "item", buf[p:end], value
                        start = pos = end
                        continue
                elif depth > 1 and indent is not None:
                    nl = buf.rfind("\n", start, p)
                    if (nl >= 0 and p - nl - 1 == indent and not buf[nl + 1:p].strip(_WS)
                            and _broken_by(buf, start, p)):
                        yield "item", buf[start:p].strip(_WS), UNPARSED  # an unclosed item: resume at the next one
                        start, depth = p, 1
                depth += 1
            elif tok in ("}", "]"):
                if depth > 1:
                    depth -= 1
                elif tok == "]":
                    if buf[start:p].strip(_WS):
                        yield "item", buf[start:p].strip(_WS), UNPARSED
                    state, depth, start = "after", 0, p + 1
                    break
            elif tok == ",":
                if depth == 1:
                    if buf[start:p].strip(_WS):
                        yield "item", buf[start:p].strip(_WS), UNPARSED
                    start = p + 1
            elif depth > 1 and not _LITERAL.fullmatch(tok):
                b = _OBJECT_BOUNDARY.search(buf, start + 1, p)
                if b is not None:  # a string ran on: the next record starts at that boundary's '{'
                    yield "item", buf[start:b.start() + 1].strip(_WS), UNPARSED
                    start = pos = b.end() - 1
                    depth = 1
        cut = min(pos, start)
        buf, pos, start = buf[cut:], pos - cut, start - cut
    if state == "after":  # what follows the array is one record, kept to its first TAIL characters
        tail = buf[start:].strip(_WS)
        while len(tail) < TAIL and (chunk := stream.read(chunk_size)):
            tail = (tail + decoder.decode(chunk)).strip(_WS)
        if tail:
            yield "after", tail[:TAIL], UNPARSED
    elif buf[start:].strip(_WS):
        yield "item", buf[start:].strip(_WS), UNPARSED  # an array cut off by the end of the file


def count_items(stream: IO[bytes]) -> int:
    """How many items (records) the top-level array in `stream` holds."""
    return sum(1 for _ in split_array(stream))
