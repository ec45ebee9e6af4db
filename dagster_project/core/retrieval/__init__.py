"""Multi-turn (multimodal) clarification for search (seed: ClariMM dataset + the Mario re-ranker).

Pure functions, no Dagster, no I/O beyond reading the input files a user points params at:

- import: single-turn clarification QA (ClariQ / Melon shape, the ClariQ TSV read as-is), a document
  collection and TREC qrels, each validated record by record; bad records are quarantined with a reason.
- §3.1 session synthesis: the QA pairs one facet (hidden intent) received are combined into 2-, 3- and
  4-turn conversations with ``itertools.combinations`` chained over facets, a stream that is never
  materialised, and ``per_length`` sessions are drawn from it by seeded reservoir sampling (Algorithm L).
- Appendix A refinement: prompt A (two QA pairs say the same thing -> drop), prompt B (the facet is already
  revealed at turn t -> cut there, the session moves to length t) and Algorithm 1 (answers rewritten so the
  intent is concealed on the first turn, hinted in the middle, revealed on the last).
- Appendix D inferred query; §4.3 two-phase retrieval: BM25 (bm25s) first phase, then a MiniLM bi-encoder
  re-rank or the constrained generative re-rank over YAKE keyword IDs, one decoding step per rank whose
  JSON schema enumerates exactly the IDs not yet generated (unknown or repeated IDs cannot be produced).
- §5 metrics (MRR, P@k, nDCG@k by trec_eval via pytrec_eval, see core/metrics.py) per ranker, multi- vs single-turn input,
  modality and number of turns; TREC run / qrels export and parsing.
"""

from __future__ import annotations

import base64
import csv
import itertools
import json
import math
import mimetypes
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from dagster_project.llm.chat import ChatRequest, ChatResult, canonical_json
from dagster_project.llm.parsing import parse_json_object, require_fields
from dagster_project.llm.prompts import load_prompt

T = TypeVar("T")

QA_REQUIRED = ("topic_id", "initial_request", "facet_id", "facet_desc", "question_id", "question", "answer")
DOC_REQUIRED = ("doc_id", "text")
RANKERS = ("bm25", "bm25_history", "dense_rerank", "generative_rerank")
INPUTS = ("multi_turn", "single_turn")
TEXT_ONLY, MULTIMODAL = "text_only", "multimodal"


class InputFileError(ValueError):
    """An input file cannot be read at all (missing, unknown format, missing column): names file and field."""


# =========================================================================== reading records

def read_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield (record number, record, None) or (record number, None, reason) for every record of a file.

    Formats by extension: .tsv (ClariQ layout, read as-is), .csv, .jsonl, .json (a list of objects),
    .parquet. Record numbers are 1-based data rows (the header is not a record). A record that cannot be
    parsed is yielded with its reason; only an unreadable file raises InputFileError.
    """
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found (check the path in params.yaml: retrieval)")
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        yield from _read_delimited(path, "\t" if suffix == ".tsv" else ",")
    elif suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            n = 0
            for line in fh:
                if not line.strip():
                    continue
                n += 1
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    yield n, None, f"invalid JSON: {err.msg} at char {err.pos}"
                    continue
                yield (n, obj, None) if isinstance(obj, dict) else (n, None, f"expected an object, got "
                                                                        f"{type(obj).__name__}")
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise InputFileError(f"{path}: not valid JSON: {err}") from None
        if not isinstance(data, list):
            raise InputFileError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
        for n, obj in enumerate(data, start=1):
            yield (n, obj, None) if isinstance(obj, dict) else (n, None, f"expected an object, got "
                                                                    f"{type(obj).__name__}")
    elif suffix == ".parquet":
        for n, obj in enumerate(pl.read_parquet(path).iter_rows(named=True), start=1):
            yield n, obj, None
    else:
        raise InputFileError(f"{path}: unknown format {suffix!r}; use .tsv, .csv, .jsonl, .json or .parquet")


def _read_delimited(path: Path, sep: str) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=sep)
        header = next(reader, None)
        if not header:
            raise InputFileError(f"{path}: empty file (no header row)")
        header = [h.strip() for h in header]
        for n, row in enumerate(reader, start=1):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                yield n, None, f"expected {len(header)} fields, got {len(row)}"
                continue
            yield n, dict(zip(header, row)), None


def _require_columns(path: str | Path, records: list[tuple[int, dict | None, str | None]],
                     required: Sequence[str]) -> None:
    """A file whose (first parsed) record lacks a required column fails as a whole, naming the column."""
    first = next((r for _, r, _ in records if r is not None), None)
    if first is None:
        return
    missing = [c for c in required if c not in first]
    if missing:
        raise InputFileError(f"{path}: missing column(s) {missing}; found {sorted(first)}; "
                             f"required: {list(required)}")


def _text(value: Any) -> str | None:
    """A non-empty stripped string (ids may come as numbers), else None."""
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    s = str(value).strip()
    return s or None


def parse_images(value: Any) -> list[str]:
    """Image references of one question: a list, a JSON list string, or a '|' / ';' separated string."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, str):
        s = value.strip()
        if not s:
            return []
        if s.startswith("["):
            items = json.loads(s)  # ValueError -> quarantined by the caller
            if not isinstance(items, list):
                raise ValueError("images: expected a JSON list")
        else:
            items = s.replace(";", "|").split("|")
    else:
        raise ValueError(f"images: expected a list or a string, got {type(value).__name__}")
    return [str(i).strip() for i in items if str(i).strip()]


_REJECT_SCHEMA = {"source": pl.Utf8, "record": pl.Int64, "field": pl.Utf8, "reason": pl.Utf8, "raw": pl.Utf8}


def _reject(source: str, record: int, field: str | None, reason: str, raw: Any) -> dict[str, Any]:
    return {"source": source, "record": record, "field": field, "reason": reason,
            "raw": None if raw is None else json.dumps(raw, default=str, ensure_ascii=False)[:2000]}


@dataclass(frozen=True)
class Imported:
    """Kept rows, quarantined rows (with reason) and the number of records read."""

    kept: pl.DataFrame
    rejected: pl.DataFrame
    n_records: int

    def summary(self) -> dict[str, int]:
        return {"records": self.n_records, "kept": self.kept.height, "rejected": self.rejected.height}


QA_SCHEMA = {
    "qa_id": pl.Utf8, "topic_id": pl.Utf8, "initial_request": pl.Utf8, "topic_desc": pl.Utf8, "facet_id": pl.Utf8,
    "facet_desc": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8, "answer": pl.Utf8,
    "images": pl.List(pl.Utf8), "source": pl.Utf8, "record": pl.Int64,
}


def import_clarification_qa(path: str | Path) -> Imported:
    """Validate single-turn clarification QA (one row per facet x question) record by record.

    Quarantined: unparseable records, an empty required field (ClariQ's 'no question' rows Q00001 have an
    empty question and answer), unreadable image lists, a repeated (facet_id, question_id) and a facet
    that appears under a second topic. qa_id = facet_id/question_id.
    """
    source = Path(path).name
    records = list(read_records(path))
    _require_columns(path, records, QA_REQUIRED)
    kept, rejected = [], []
    seen: dict[tuple[str, str], int] = {}
    facet_topic: dict[str, tuple[str, int]] = {}
    for n, rec, err in records:
        if rec is None:
            rejected.append(_reject(source, n, None, err or "unreadable record", None))
            continue
        values = {c: _text(rec.get(c)) for c in QA_REQUIRED}
        empty = [c for c in QA_REQUIRED if values[c] is None]
        if empty:
            rejected.append(_reject(source, n, empty[0], f"empty or missing field {empty[0]!r}", rec))
            continue
        try:
            images = parse_images(rec.get("images"))
        except (ValueError, TypeError) as e:
            rejected.append(_reject(source, n, "images", f"unreadable image list: {e}", rec))
            continue
        key = (values["facet_id"], values["question_id"])
        if key in seen:
            rejected.append(_reject(source, n, "question_id", f"duplicate facet/question pair {key[0]}/{key[1]} "
                                                              f"(first at record {seen[key]})", rec))
            continue
        owner = facet_topic.get(values["facet_id"])
        if owner and owner[0] != values["topic_id"]:
            rejected.append(_reject(source, n, "facet_id", f"facet {values['facet_id']} already belongs to topic "
                                                           f"{owner[0]} (record {owner[1]})", rec))
            continue
        seen[key] = n
        facet_topic.setdefault(values["facet_id"], (values["topic_id"], n))
        kept.append({"qa_id": f"{key[0]}/{key[1]}", **values, "topic_desc": _text(rec.get("topic_desc")),
                     "images": images, "source": source, "record": n})
    return Imported(pl.DataFrame(kept, schema=QA_SCHEMA), pl.DataFrame(rejected, schema=_REJECT_SCHEMA),
                    len(records))


DOC_SCHEMA = {"doc_id": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8, "source": pl.Utf8, "record": pl.Int64}


def import_documents(path: str | Path) -> Imported:
    """Validate a document collection (doc_id, text, optional title); empty text or a repeated id is quarantined."""
    source = Path(path).name
    records = list(read_records(path))
    _require_columns(path, records, DOC_REQUIRED)
    kept, rejected, seen = [], [], {}
    for n, rec, err in records:
        if rec is None:
            rejected.append(_reject(source, n, None, err or "unreadable record", None))
            continue
        doc_id, text = _text(rec.get("doc_id")), _text(rec.get("text"))
        if doc_id is None or text is None:
            field = "doc_id" if doc_id is None else "text"
            rejected.append(_reject(source, n, field, f"empty or missing field {field!r}", rec))
            continue
        if doc_id in seen:
            rejected.append(_reject(source, n, "doc_id", f"duplicate doc_id {doc_id} (first at record {seen[doc_id]})",
                                    rec))
            continue
        seen[doc_id] = n
        kept.append({"doc_id": doc_id, "title": _text(rec.get("title")), "text": text, "source": source, "record": n})
    return Imported(pl.DataFrame(kept, schema=DOC_SCHEMA), pl.DataFrame(rejected, schema=_REJECT_SCHEMA),
                    len(records))


QRELS_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64, "source": pl.Utf8, "record": pl.Int64}


def parse_qrels(lines: Iterable[str], source: str = "qrels") -> tuple[list[dict], list[dict]]:
    """TREC qrels lines ``qid iter doc_id rel`` -> (rows, rejected). Blank and '#' lines are skipped."""
    rows, rejected = [], []
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split()
        if len(parts) != 4:
            rejected.append(_reject(source, n, None, f"expected 4 fields 'qid iter doc_id rel', got {len(parts)}", s))
            continue
        try:
            rel = int(parts[3])
        except ValueError:
            rejected.append(_reject(source, n, "rel", f"relevance {parts[3]!r} is not an integer", s))
            continue
        rows.append({"qid": parts[0], "doc_id": parts[2], "rel": rel, "source": source, "record": n})
    return rows, rejected


def import_qrels(path: str | Path, facet_ids: Iterable[str], doc_ids: Iterable[str]) -> Imported:
    """TREC qrels whose qid is a facet id; unknown facets / documents and repeated pairs are quarantined."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found (check retrieval.qrels_path in params.yaml)")
    with path.open(encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    rows, rejected = parse_qrels(lines, path.name)
    facets, docs = set(facet_ids), set(doc_ids)
    kept, seen = [], {}
    for r in rows:
        raw = f"{r['qid']} 0 {r['doc_id']} {r['rel']}"
        if r["qid"] not in facets:
            rejected.append(_reject(r["source"], r["record"], "qid", f"unknown facet id {r['qid']}", raw))
        elif r["doc_id"] not in docs:
            rejected.append(_reject(r["source"], r["record"], "doc_id", f"unknown doc id {r['doc_id']}", raw))
        elif (r["qid"], r["doc_id"]) in seen:
            rejected.append(_reject(r["source"], r["record"], "doc_id", f"duplicate judgement {r['qid']}/{r['doc_id']} "
                                                                      f"(first at line {seen[(r['qid'], r['doc_id'])]})",
                                    raw))
        else:
            seen[(r["qid"], r["doc_id"])] = r["record"]
            kept.append(r)
    n_records = sum(1 for s in lines if s.strip() and not s.strip().startswith("#"))
    return Imported(pl.DataFrame(kept, schema=QRELS_SCHEMA),
                    pl.DataFrame(sorted(rejected, key=lambda x: x["record"]), schema=_REJECT_SCHEMA), n_records)


# =========================================================================== keyword IDs (§4.3.2)

def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def keyword_ids(texts: Sequence[str], n_keywords: int = 5, ngram: int = 2) -> list[str]:
    """One keyword ID per document: its top YAKE keywords, lower-cased, joined by ' | ', unique in the collection.

    A keyword whose words (plural 's' ignored) are all covered by keywords already taken is skipped, so
    'teddy bear | teddy bears | bear' becomes 'teddy bear | <next new keyword>'. Two documents with the
    same keywords get ' #2', ' #3' ... appended in collection order: an ID always names exactly one document.
    """
    import yake

    extractor = yake.KeywordExtractor(lan="en", n=ngram, top=4 * n_keywords, dedup_lim=0.7)
    out, used = [], {}
    for text in texts:
        kws: list[str] = []
        covered: set[str] = set()
        for kw, _score in extractor.extract_keywords(text or ""):
            words = kw.lower().split()
            stems = {_stem(w) for w in words}
            if not words or stems <= covered:
                continue
            covered |= stems
            kws.append(" ".join(words))
            if len(kws) == n_keywords:
                break
        base = " | ".join(kws) or "untitled"
        used[base] = used.get(base, 0) + 1
        out.append(base if used[base] == 1 else f"{base} #{used[base]}")
    return out


# =========================================================================== §3.1 session synthesis

def facet_pools(qa: pl.DataFrame) -> list[tuple[str, list[str]]]:
    """(facet_id, qa_ids in question order) for every facet: the QA pairs one hidden intent received."""
    pools = qa.sort("facet_id", "question_id").group_by("facet_id", maintain_order=True).agg(pl.col("qa_id"))
    return [(f, list(ids)) for f, ids in pools.iter_rows()]


def count_combinations(pools: Sequence[tuple[str, Sequence[str]]], length: int) -> int:
    """How many length-turn conversations the exhaustive synthesis yields (without generating them)."""
    return sum(math.comb(len(ids), length) for _, ids in pools)


def iter_combinations(pools: Sequence[tuple[str, Sequence[str]]], length: int) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every (facet_id, qa_ids) conversation of the given length, streamed facet after facet (never stored)."""
    return itertools.chain.from_iterable(
        zip(itertools.repeat(facet), itertools.combinations(ids, length)) for facet, ids in pools)


def _unit(rng: random.Random) -> float:
    u = rng.random()
    while u == 0.0:
        u = rng.random()
    return u


def reservoir_sample(items: Iterable[T], k: int, rng: random.Random) -> list[tuple[int, T]]:
    """A uniform sample of k items from a stream of unknown length, as (stream index, item) in stream order.

    Algorithm L (Li 1994): after the reservoir fills, the number of items to skip is drawn directly and the
    skipped items are consumed by ``itertools.islice`` in C, so memory is O(k) and time is dominated by
    generating the stream, not by Python per item. Fewer than k items: all of them.
    """
    if k <= 0:
        return []
    it = iter(items)
    reservoir = list(enumerate(itertools.islice(it, k)))
    if len(reservoir) < k:
        return reservoir
    sentinel = object()
    index = k - 1
    w = math.exp(math.log(_unit(rng)) / k)
    while True:
        skip = math.floor(math.log(_unit(rng)) / math.log1p(-w)) if w < 1.0 else 0
        item = next(itertools.islice(it, skip, skip + 1), sentinel)
        if item is sentinel:
            break
        index += skip + 1
        reservoir[rng.randrange(k)] = (index, item)
        w *= math.exp(math.log(_unit(rng)) / k)
    return sorted(reservoir, key=lambda x: x[0])


CANDIDATE_SCHEMA = {
    "session_id": pl.Utf8, "facet_id": pl.Utf8, "sampled_length": pl.Int64, "stream_index": pl.Int64,
    "combinations_available": pl.Int64, "target_per_length": pl.Int64, "qa_ids": pl.List(pl.Utf8),
}


def sample_sessions(pools: Sequence[tuple[str, Sequence[str]]], lengths: Sequence[int], per_length: int,
                    seed: int) -> pl.DataFrame:
    """Seeded reservoir sample of per_length conversations per length from the streamed combinations.

    Each length has its own generator seeded by (seed, length), so adding a length does not change the
    sessions drawn for the others. session_id = L<length>:<facet_id>:<question ids joined by '+'>.
    """
    rows = []
    for length in lengths:
        available = count_combinations(pools, length)
        rng = random.Random(f"{seed}:{length}")
        for index, (facet, ids) in reservoir_sample(iter_combinations(pools, length), per_length, rng):
            qids = "+".join(i.split("/", 1)[1] for i in ids)
            rows.append({"session_id": f"L{length}:{facet}:{qids}", "facet_id": facet, "sampled_length": length,
                         "stream_index": index, "combinations_available": available,
                         "target_per_length": per_length, "qa_ids": list(ids)})
    return pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)


# =========================================================================== Appendix A refinement

# Decisions only (no free-text reason): a few output tokens per check keeps the refinement cheap. The
# conservative choice (keep the session as it is) is listed first in prompt and schema: a judge too weak to
# decide tends to repeat the first option (the embedded 135M model does, measured), and should then leave
# the sessions alone rather than drop or cut every one of them.
SIMILAR_CHOICES = {"different": False, "same": True}
REVEALED_CHOICES = {"not yet": False, "revealed": True}
SIMILAR_SCHEMA = {"type": "object", "properties": {"information": {"type": "string", "enum": list(SIMILAR_CHOICES)}},
                  "required": ["information"]}
REVEALED_SCHEMA = {"type": "object", "properties": {"intention": {"type": "string", "enum": list(REVEALED_CHOICES)}},
                   "required": ["intention"]}
REWRITE_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "minLength": 2, "maxLength": 150}},
                  "required": ["answer"]}
REWRITE_PROMPTS = {"conceal": "retrieval_rewrite_conceal", "hint": "retrieval_rewrite_hint",
                   "reveal": "retrieval_rewrite_reveal"}


@dataclass(frozen=True)
class Verdict:
    """One parsed LLM decision: value (None when unusable), status ok/parse_error/llm_error, error, raw output."""

    value: Any
    status: str
    error: str | None
    raw: str
    model: str = ""


def _string_field(res: ChatResult, field: str) -> tuple[str | None, Verdict | None]:
    """(the reply's non-empty string field, None), or (None, the failed Verdict)."""
    if res.error:
        return None, Verdict(None, "llm_error", res.error, res.text, res.model)
    obj, err = parse_json_object(res.text)
    err = err or require_fields(obj, {field: str})
    if err:
        return None, Verdict(None, "parse_error", err, res.text, res.model)
    return obj[field], None


def parse_choice(res: ChatResult, field: str, choices: dict[str, Any]) -> Verdict:
    """Map a JSON reply's field to a value via choices (e.g. yes -> True); never raises."""
    value, failed = _string_field(res, field)
    if failed:
        return failed
    key = value.strip().lower()
    if key not in choices:
        return Verdict(None, "parse_error", f"{field} {value!r} not in {sorted(choices)}", res.text, res.model)
    return Verdict(choices[key], "ok", None, res.text, res.model)


def parse_text_field(res: ChatResult, field: str) -> Verdict:
    """A JSON reply's string field, whitespace collapsed; never raises."""
    value, failed = _string_field(res, field)
    if failed:
        return failed
    return Verdict(" ".join(value.split()), "ok", None, res.text, res.model)


def session_pairs(qa_ids: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of turns of a session (prompt A compares two QA pairs at a time)."""
    return list(itertools.combinations(qa_ids, 2))


def similar_pair_requests(pairs: Sequence[tuple[str, str]], qa: dict[str, dict], seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("retrieval_similar_pairs")
    return [ChatRequest.of(prompt.messages(question1=qa[a]["question"], answer1=qa[a]["answer"],
                                           question2=qa[b]["question"], answer2=qa[b]["answer"]),
                           prompt.version, SIMILAR_SCHEMA, temperature=0.0, seed=seed, max_tokens=16)
            for a, b in pairs]


def revealed_requests(qa_ids: Sequence[str], qa: dict[str, dict], seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("retrieval_facet_revealed")
    return [ChatRequest.of(prompt.messages(facet=qa[i]["facet_desc"], question=qa[i]["question"],
                                           answer=qa[i]["answer"]),
                           prompt.version, REVEALED_SCHEMA, temperature=0.0, seed=seed, max_tokens=16)
            for i in qa_ids]


def first_revealed_turn(flags: Sequence[bool | None]) -> int | None:
    """1-based turn whose answer already reveals the facet (None/unknown counts as not revealed)."""
    return next((t for t, f in enumerate(flags, start=1) if f is True), None)


def cut_at_reveal(qa_ids: Sequence[str], flags: Sequence[bool | None]) -> tuple[list[str], str | None]:
    """Appendix A prompt B: keep the turns up to the one that reveals the facet.

    Revealed on the last turn (or never): unchanged. Revealed on turn t in 2..n-1: the first t turns (the
    session moves to the t-turn set). Revealed on turn 1: no multi-turn session is left -> reason.
    """
    t = first_revealed_turn(flags)
    if t is None or t >= len(qa_ids):
        return list(qa_ids), None
    if t == 1:
        return list(qa_ids[:1]), "facet revealed at turn 1"
    return list(qa_ids[:t]), None


def rewrite_stage(turn: int, n_turns: int) -> str:
    """Algorithm 1: conceal the intent on the first turn, reveal it fully on the last, hint in between."""
    if turn == n_turns:
        return "reveal"
    return "conceal" if turn == 1 else "hint"


def rewrite_requests(items: Sequence[tuple[str, str]], qa: dict[str, dict], temperature: float,
                     seed: int = 0) -> list[ChatRequest]:
    """One request per (qa_id, stage)."""
    prompts = {s: load_prompt(n) for s, n in REWRITE_PROMPTS.items()}
    out = []
    for qa_id, stage in items:
        p = prompts[stage]
        row = qa[qa_id]
        out.append(ChatRequest.of(p.messages(facet=row["facet_desc"], question=row["question"], answer=row["answer"]),
                                  p.version, REWRITE_SCHEMA, temperature=temperature, seed=seed, max_tokens=64))
    return out


def unique_in_order(items: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(items))


def request_key(req: ChatRequest) -> str:
    """Identity of a request within one batch (messages, schema, sampling, template version)."""
    return canonical_json([list(req.messages), req.json_schema, req.sampling.__dict__, req.prompt_version])


_STATUS_RANK = {"ok": 0, "parse_error": 1, "llm_error": 2}


def worst_status(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _STATUS_RANK.get(s, 3), default="ok")


TURN_TYPE = pl.Struct({"turn": pl.Int64, "qa_id": pl.Utf8, "question_id": pl.Utf8, "question": pl.Utf8,
                       "answer_raw": pl.Utf8, "answer": pl.Utf8, "images": pl.List(pl.Utf8),
                       "rewrite_stage": pl.Utf8, "rewrite_status": pl.Utf8})
LOG_TYPE = pl.Struct({"step": pl.Utf8, "key": pl.Utf8, "decision": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
                      "raw_output": pl.Utf8})


def refine_sessions(candidates: pl.DataFrame, qa: dict[str, dict], similar: dict[tuple[str, str], Verdict],
                    revealed: dict[str, Verdict], rewrites: dict[tuple[str, str], Verdict]) -> pl.DataFrame:
    """Apply prompt A, prompt B and Algorithm 1 verdicts to the sampled sessions; every session stays a row.

    kept=False rows carry reject_reason: 'similar QA pairs a ~ b', 'facet revealed at turn 1', or
    'duplicate of <session_id> after cut'. A missing verdict (check switched off) counts as
    'not similar' / 'not revealed' / 'answer unchanged'. status is the worst status of the calls the
    session depended on (a failed check is treated as not-similar / not-revealed, and says so in error).
    """
    rows = []
    kept_keys: dict[tuple[str, tuple[str, ...]], str] = {}
    # shorter sampled lengths first: a session cut down to length t is the duplicate, not the one sampled at t
    ordered = candidates.sort("sampled_length", "stream_index")
    for c in ordered.iter_rows(named=True):
        ids = list(c["qa_ids"])
        log, reason = [], None
        for a, b in session_pairs(ids):
            v = similar.get((a, b))
            if v is None:
                continue
            log.append({"step": "similar_pair", "key": f"{a} ~ {b}", "decision": _show(v.value), "status": v.status,
                        "error": v.error, "raw_output": v.raw})
            if v.value is True and reason is None:
                reason = f"similar QA pairs {a} ~ {b}"
        flags = []
        for i in ids:
            v = revealed.get(i)
            flags.append(None if v is None else v.value)
            if v is not None:
                log.append({"step": "facet_revealed", "key": i, "decision": _show(v.value), "status": v.status,
                            "error": v.error, "raw_output": v.raw})
        cut_from = None
        if reason is None:
            new_ids, reason = cut_at_reveal(ids, flags)
            if reason is None and len(new_ids) < len(ids):
                cut_from, ids = len(ids), new_ids
        if reason is None:
            key = (c["facet_id"], tuple(ids))
            if key in kept_keys:
                reason = f"duplicate of {kept_keys[key]} after cut"
            else:
                kept_keys[key] = c["session_id"]
        n = len(ids)
        turns = []
        for t, i in enumerate(ids, start=1):
            stage = rewrite_stage(t, n)
            v = rewrites.get((i, stage)) if reason is None else None
            if v is not None:
                log.append({"step": f"rewrite_{stage}", "key": i, "decision": v.value, "status": v.status,
                            "error": v.error, "raw_output": v.raw})
            row = qa[i]
            turns.append({"turn": t, "qa_id": i, "question_id": row["question_id"], "question": row["question"],
                          "answer_raw": row["answer"],
                          "answer": v.value if v is not None and v.status == "ok" else row["answer"],
                          "images": list(row["images"] or []),
                          "rewrite_stage": stage if v is not None else None,
                          "rewrite_status": v.status if v is not None else None})
        statuses = [e["status"] for e in log]
        errors = [f"{e['step']} {e['key']}: {e['error']}" for e in log if e["error"]]
        first = qa[ids[0]]
        rows.append({
            "session_id": c["session_id"], "topic_id": first["topic_id"], "facet_id": c["facet_id"],
            "facet_desc": first["facet_desc"], "initial_request": first["initial_request"],
            "sampled_length": c["sampled_length"], "n_turns": n, "cut_from": cut_from,
            "stream_index": c["stream_index"], "combinations_available": c["combinations_available"],
            "target_per_length": c["target_per_length"], "turns": turns,
            "has_images": any(t["images"] for t in turns), "kept": reason is None, "reject_reason": reason,
            "status": worst_status(statuses), "error": "; ".join(errors)[:2000] or None, "refinement": log,
        })
    schema = {"session_id": pl.Utf8, "topic_id": pl.Utf8, "facet_id": pl.Utf8, "facet_desc": pl.Utf8,
              "initial_request": pl.Utf8, "sampled_length": pl.Int64, "n_turns": pl.Int64, "cut_from": pl.Int64,
              "stream_index": pl.Int64, "combinations_available": pl.Int64, "target_per_length": pl.Int64,
              "turns": pl.List(TURN_TYPE), "has_images": pl.Boolean, "kept": pl.Boolean,
              "reject_reason": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8, "refinement": pl.List(LOG_TYPE)}
    return pl.DataFrame(rows, schema=schema).sort("sampled_length", "stream_index")


def _show(value: Any) -> str | None:
    return None if value is None else ("yes" if value is True else "no" if value is False else str(value))


def length_summary(sessions: pl.DataFrame, lengths: Sequence[int]) -> pl.DataFrame:
    """Per length: combinations available, sampled, kept at that final length, target and shortfall."""
    rows = []
    for n in lengths:
        sampled = sessions.filter(pl.col("sampled_length") == n)
        kept = sessions.filter(pl.col("kept") & (pl.col("n_turns") == n))
        target = int(sampled["target_per_length"].max() or 0) if sampled.height else 0
        rows.append({
            "n_turns": n,
            "combinations_available": int(sampled["combinations_available"].max() or 0) if sampled.height else 0,
            "sampled": sampled.height,
            "cut_to_shorter": sampled.filter(pl.col("cut_from").is_not_null()).height,
            "dropped": sampled.filter(~pl.col("kept")).height,
            "moved_in": kept.filter(pl.col("cut_from").is_not_null()).height,
            "kept": kept.height, "target": target, "shortfall": max(target - kept.height, 0),
        })
    return pl.DataFrame(rows)


# =========================================================================== Appendix D inferred query

INFER_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 3, "maxLength": 100}},
    "required": ["query"],
}


def conversation_text(initial_request: str, turns: Sequence[dict], upto: int | None = None) -> str:
    """The dialogue as plain text: the user's request, then each clarifying question and answer."""
    lines = [f"User: {initial_request}"]
    for t in list(turns)[:upto]:
        lines.append(f"System: {t['question']}")
        lines.append(f"User: {t['answer']}")
    return "\n".join(lines)


def inference_inputs(sessions: pl.DataFrame, inputs: Sequence[str]) -> pl.DataFrame:
    """One row per kept session and input: multi_turn = the whole session, single_turn = its first turn only."""
    rows = []
    for s in sessions.filter(pl.col("kept")).iter_rows(named=True):
        for inp in inputs:
            upto = 1 if inp == "single_turn" else None
            turns = list(s["turns"])[:upto]
            rows.append({"query_id": f"{s['session_id']}|{inp}", "session_id": s["session_id"], "input": inp,
                         "topic_id": s["topic_id"], "facet_id": s["facet_id"], "n_turns": s["n_turns"],
                         "initial_request": s["initial_request"],
                         "conversation": conversation_text(s["initial_request"], turns),
                         "images": [img for t in turns for img in (t["images"] or [])]})
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "session_id": pl.Utf8, "input": pl.Utf8,
                                      "topic_id": pl.Utf8, "facet_id": pl.Utf8, "n_turns": pl.Int64,
                                      "initial_request": pl.Utf8, "conversation": pl.Utf8,
                                      "images": pl.List(pl.Utf8)})


def inference_requests(conversations: Sequence[str], seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("retrieval_infer_query")
    return [ChatRequest.of(prompt.messages(conversation=c), prompt.version, INFER_SCHEMA, temperature=0.0,
                           seed=seed, max_tokens=40) for c in conversations]


# =========================================================================== §4.3.1 BM25 first phase

class BM25Index:
    """bm25s over title + text, English stopwords; search returns (doc_id, score) with score > 0, best first."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str]):
        import bm25s

        self._bm25s = bm25s
        self.doc_ids = list(doc_ids)
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        if not queries:
            return []
        k = min(k, len(self.doc_ids))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        # a query whose words are all stopwords / unseen gets no hits (bm25s wants a non-empty token list)
        safe = [t if t else ["\x00"] for t in tokens]
        idx, scores = self.model.retrieve(safe, k=k, show_progress=False, n_threads=1)
        return [[(self.doc_ids[int(i)], float(s)) for i, s in zip(row_i, row_s) if s > 0]
                for row_i, row_s in zip(idx, scores)]


def snippet(text: str, max_chars: int) -> str:
    """The first max_chars characters of a document, cut at a word boundary ('' when max_chars is 0)."""
    if max_chars <= 0:
        return ""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut + " ..."


def document_text(title: str | None, text: str) -> str:
    return f"{title}. {text}" if title else text


# =========================================================================== dense re-rank (MiniLM bi-encoder)

def dense_rerank(query_vecs: Any, candidates: Sequence[Sequence[str]], doc_vecs: dict[str, Any]) -> list[
        list[tuple[str, float]]]:
    """Re-order each query's first-phase candidates by cosine with the query (unit vectors: dot product).

    Ties keep the first-phase order (stable sort)."""
    import numpy as np

    out = []
    for q, cands in zip(query_vecs, candidates):
        if not cands:
            out.append([])
            continue
        sims = np.stack([doc_vecs[d] for d in cands]) @ np.asarray(q)
        order = sorted(range(len(cands)), key=lambda j: -float(sims[j]))
        out.append([(cands[j], float(sims[j])) for j in order])
    return out


# =========================================================================== §4.3.2 constrained generative re-rank

def next_id_schema(allowed: Sequence[str]) -> dict[str, Any]:
    """The decoding constraint for one rank: the reply can only be one of the allowed keyword IDs.

    The llama.cpp backend compiles this to a grammar, vLLM to structured outputs, OpenAI-compatible
    servers enforce it as json_schema: an unknown ID cannot be decoded. Each step's enum holds only the
    IDs not generated yet, so a repeat cannot be decoded either (the trie constraint of Eq. 6 at ID level).
    """
    return {"type": "object", "properties": {"next": {"type": "string", "enum": list(allowed)}},
            "required": ["next"]}


def candidate_block(candidates: Sequence[tuple[str, str]]) -> str:
    """Numbered list of '<keyword id>: snippet' lines."""
    return "\n".join(f"- [{kid}] {snippet}" for kid, snippet in candidates)


def image_part(ref: str, base_dir: str | Path | None) -> dict[str, Any]:
    """An OpenAI-style image content part: URLs pass through, local files become data URLs."""
    if ref.startswith(("http://", "https://", "data:")):
        return {"type": "image_url", "image_url": {"url": ref}}
    path = Path(ref) if Path(ref).is_absolute() or base_dir is None else Path(base_dir) / ref
    if not path.exists():
        raise FileNotFoundError(f"image {ref!r} not found at {path}")
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return {"type": "image_url",
            "image_url": {"url": f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"}}


def rerank_step_request(query: str, conversation: str, candidates: Sequence[tuple[str, str]], chosen: Sequence[str],
                        images: Sequence[dict] | None = None, seed: int = 0) -> ChatRequest:
    """One constrained decoding step: which remaining keyword ID is the next most relevant document."""
    prompt = load_prompt("retrieval_rerank_step")
    remaining = [kid for kid, _ in candidates if kid not in set(chosen)]
    msgs = prompt.messages(query=query, conversation=conversation, candidates=candidate_block(candidates),
                           chosen=", ".join(f"[{c}]" for c in chosen) or "none yet")
    if images:
        msgs[-1] = {"role": "user", "content": [{"type": "text", "text": msgs[-1]["content"]}, *images]}
    return ChatRequest.of(msgs, prompt.version, next_id_schema(remaining), temperature=0.0, seed=seed,
                          max_tokens=48)


def parse_next_id(res: ChatResult, allowed: Sequence[str]) -> Verdict:
    """The generated ID, or parse_error when a backend ignored the constraint (never silently accepted)."""
    if res.error:
        return Verdict(None, "llm_error", res.error, res.text, res.model)
    obj, err = parse_json_object(res.text)
    err = err or require_fields(obj, {"next": str})
    if err:
        return Verdict(None, "parse_error", err, res.text, res.model)
    if obj["next"] not in set(allowed):
        return Verdict(None, "parse_error", f"generated ID {obj['next']!r} is not an allowed candidate "
                                            "(the backend did not enforce the schema)", res.text, res.model)
    return Verdict(obj["next"], "ok", None, res.text, res.model)


@dataclass
class GenerativeTask:
    """One query to re-rank: its text, the conversation, candidate (keyword id, snippet) pairs, doc ids, images."""

    query: str
    conversation: str
    candidates: list[tuple[str, str]]
    doc_ids: list[str]
    images: list[dict] | None = None


@dataclass
class GenerativeResult:
    order: list[str]  # doc ids: generated ones first, then the remaining first-phase order
    generated: int
    status: str
    error: str | None
    raw_outputs: list[str]
    model: str
    prompt_version: str


def generative_rerank(tasks: Sequence[GenerativeTask], steps: int,
                      chat: Callable[[list[ChatRequest]], list[ChatResult]], seed: int = 0) -> list[GenerativeResult]:
    """Mario's inference as constrained decoding: `steps` ranks are generated, one batched call per rank.

    Step j sends every still-running task one request whose schema allows only its IDs not chosen in steps
    1..j-1. A task whose step fails stops generating (status and error recorded); its remaining ranks keep
    the first-phase order, as do ranks beyond `steps`.
    """
    chosen: list[list[str]] = [[] for _ in tasks]
    raws: list[list[str]] = [[] for _ in tasks]
    status = ["ok"] * len(tasks)
    errors: list[str | None] = [None] * len(tasks)
    models = [""] * len(tasks)
    version = ""
    for _ in range(steps):
        active = [i for i, t in enumerate(tasks) if status[i] == "ok" and len(chosen[i]) < len(t.candidates)]
        if not active:
            break
        reqs = [rerank_step_request(tasks[i].query, tasks[i].conversation, tasks[i].candidates, chosen[i],
                                    tasks[i].images, seed) for i in active]
        version = reqs[0].prompt_version
        for i, req, res in zip(active, reqs, chat(reqs), strict=True):
            allowed = req.json_schema["properties"]["next"]["enum"]
            v = parse_next_id(res, allowed)
            raws[i].append(res.text)
            models[i] = res.model or models[i]
            if v.status != "ok":
                status[i], errors[i] = v.status, v.error
                continue
            chosen[i].append(v.value)
    out = []
    for i, t in enumerate(tasks):
        by_kid = dict(zip((k for k, _ in t.candidates), t.doc_ids))
        head = [by_kid[k] for k in chosen[i]]
        tail = [d for d in t.doc_ids if d not in set(head)]
        out.append(GenerativeResult(head + tail, len(head), status[i], errors[i], raws[i], models[i], version))
    return out


# =========================================================================== runs (TREC) and metrics tables

RUN_SCHEMA = {
    "query_id": pl.Utf8, "session_id": pl.Utf8, "input": pl.Utf8, "facet_id": pl.Utf8, "n_turns": pl.Int64,
    "ranker": pl.Utf8, "modality": pl.Utf8, "run_id": pl.Utf8, "rank": pl.Int64, "doc_id": pl.Utf8,
    "score": pl.Float64, "stage": pl.Utf8, "query_text": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
}


def run_rows(base: dict[str, Any], ranked: Sequence[tuple[str, float | None, str]], raw: Sequence[str] = ()) -> list[dict]:
    """Rows of one ranked list: ranks contiguous from 1; raw[j] is the model output that produced rank j+1."""
    return [{**base, "rank": r, "doc_id": d, "score": s, "stage": stage,
             "raw_output": raw[r - 1] if r - 1 < len(raw) else None}
            for r, (d, s, stage) in enumerate(ranked, start=1)]


def to_trec_run(runs: pl.DataFrame, tag_col: str = "run_id") -> str:
    """TREC run lines 'qid Q0 doc_id rank score tag'; the score is the rank-derived 1/rank when none is given."""
    lines = []
    for r in runs.sort("query_id", "rank").iter_rows(named=True):
        score = r["score"] if r.get("score") is not None else 1.0 / r["rank"]
        tag = str(r.get(tag_col) or "run").replace(" ", "_")
        lines.append(f"{r['query_id']} Q0 {r['doc_id']} {r['rank']} {score:.6f} {tag}")
    return "\n".join(lines) + ("\n" if lines else "")


def parse_trec_run(lines: Iterable[str]) -> tuple[pl.DataFrame, list[dict]]:
    """TREC run lines -> (query_id, doc_id, rank, score, tag) and rejected lines with a reason."""
    rows, rejected = [], []
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        parts = s.split()
        if len(parts) != 6:
            rejected.append(_reject("run", n, None, f"expected 6 fields 'qid Q0 doc rank score tag', got {len(parts)}",
                                    s))
            continue
        try:
            rank, score = int(parts[3]), float(parts[4])
        except ValueError:
            rejected.append(_reject("run", n, "rank", "rank must be an integer and score a number", s))
            continue
        rows.append({"query_id": parts[0], "doc_id": parts[2], "rank": rank, "score": score, "tag": parts[5]})
    df = pl.DataFrame(rows, schema={"query_id": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64,
                                    "tag": pl.Utf8})
    return df, rejected


def to_trec_qrels(qrels: pl.DataFrame, query_facets: pl.DataFrame) -> str:
    """Qrels keyed by run query id (each query inherits its facet's judgements), for trec_eval on exported runs."""
    joined = query_facets.select("query_id", "facet_id").join(qrels.rename({"qid": "facet_id"}), on="facet_id")
    return "".join(f"{r['query_id']} 0 {r['doc_id']} {r['rel']}\n"
                   for r in joined.sort("query_id", "doc_id").iter_rows(named=True))


def relevant_by_facet(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    """facet -> {doc: rel} for facets with at least one relevant (rel > 0) document; negative grades become 0."""
    out: dict[str, dict[str, int]] = {}
    for r in qrels.iter_rows(named=True):
        out.setdefault(r["qid"], {})[r["doc_id"]] = max(int(r["rel"]), 0)
    return {f: d for f, d in out.items() if any(v > 0 for v in d.values())}


INFERRED_QUERY_RANKERS = ("bm25", "dense_rerank", "generative_rerank")


def expected_queries(inferred: pl.DataFrame, runs: pl.DataFrame, rankers: Sequence[str]) -> pl.DataFrame:
    """Every (run_id, query) a run should answer, with the status that decides whether it is evaluated.

    A query with an empty ranking (no BM25 hit) is still expected and scores 0. Status comes from the run's
    rows when it has any; otherwise it is input_error for rankers that search the inferred query when that
    query failed, else ok. Multimodal runs expect only queries whose turns carry images.
    """
    present = runs.group_by("run_id", "query_id").agg(pl.col("status").first().alias("run_status"))
    modalities = {(r, m) for r, m in runs.select("ranker", "modality").unique().iter_rows()}
    frames = []
    for ranker in rankers:
        for modality in (TEXT_ONLY, MULTIMODAL):
            if modality == MULTIMODAL and (ranker, modality) not in modalities:
                continue
            q = inferred if modality == TEXT_ONLY else inferred.filter(pl.col("images").list.len() > 0)
            fallback = (pl.when(pl.col("status") == "ok").then(pl.lit("ok")).otherwise(pl.lit("input_error"))
                        if ranker in INFERRED_QUERY_RANKERS else pl.lit("ok"))
            frames.append(q.select(
                pl.format("{}/{}/{}", pl.lit(ranker), pl.col("input"), pl.lit(modality)).alias("run_id"),
                pl.lit(ranker).alias("ranker"), "input", pl.lit(modality).alias("modality"), "query_id", "facet_id",
                "n_turns", (pl.col("images").list.len() > 0).alias("has_images"), fallback.alias("fallback_status")))
    if not frames:
        return pl.DataFrame(schema={"run_id": pl.Utf8, "ranker": pl.Utf8, "input": pl.Utf8, "modality": pl.Utf8,
                                    "query_id": pl.Utf8, "facet_id": pl.Utf8, "n_turns": pl.Int64,
                                    "has_images": pl.Boolean, "status": pl.Utf8})
    exp = pl.concat(frames).join(present, on=["run_id", "query_id"], how="left")
    return exp.with_columns(status=pl.coalesce("run_status", "fallback_status")).drop("run_status", "fallback_status")


def evaluation_table(runs: pl.DataFrame, expected: pl.DataFrame, qrels: pl.DataFrame, ks: Sequence[int],
                     evaluate: Callable[..., pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-query scores for every run_id, then means overall, by number of turns and on the image subset.

    expected: (run_id, ranker, input, modality, query_id, facet_id, n_turns, status[, has_images]), see
    expected_queries. A query is evaluated when its status is ok and its facet has a relevant document; the
    others are counted in n_excluded. A group with nothing to evaluate stays in the table with n_queries 0 and
    null metrics. When a multimodal run exists, breakdown 'with_images' repeats the means of every run over
    only the queries whose turns carry images: the multimodal run covers just those, so text_only vs
    multimodal is compared there, on the same queries, never across different populations.
    `evaluate(qrels, rankings, ks)` is core.metrics.ranking_metrics (pytrec_eval). Returns (table, per-query).
    """
    judged = relevant_by_facet(qrels)
    metric_cols = ["mrr", *[f"p_at_{k}" for k in ks], *[f"ndcg_at_{k}" for k in ks]]
    exp = expected.with_columns(usable=(pl.col("status") == "ok") & pl.col("facet_id").is_in(list(judged)))
    ranking = {(r, q): list(d) for r, q, d in runs.sort("rank").group_by("run_id", "query_id", maintain_order=True)
               .agg(pl.col("doc_id")).iter_rows()}
    frames = []
    for (run_id,), g in exp.filter(pl.col("usable")).group_by(["run_id"], maintain_order=True):
        q_rels = {r["query_id"]: judged[r["facet_id"]] for r in g.iter_rows(named=True)}
        scores = evaluate(q_rels, {q: ranking.get((run_id, q), []) for q in q_rels}, ks)
        frames.append(scores.with_columns(run_id=pl.lit(run_id)))
    per_query_schema = {"query_id": pl.Utf8, **{c: pl.Float64 for c in metric_cols}, "run_id": pl.Utf8}
    scores = pl.concat(frames) if frames else pl.DataFrame(schema=per_query_schema)
    joined = exp.join(scores, on=["run_id", "query_id"], how="left")
    keys = ["ranker", "input", "modality"]
    aggs = [pl.col("usable").sum().cast(pl.Int64).alias("n_queries"),
            (~pl.col("usable")).sum().cast(pl.Int64).alias("n_excluded"),
            *[pl.col(c).mean() for c in metric_cols]]
    overall = joined.group_by(keys).agg(aggs).with_columns(breakdown=pl.lit("overall"),
                                                           n_turns=pl.lit(None, pl.Int64))
    by_turns = joined.group_by([*keys, "n_turns"]).agg(aggs).with_columns(breakdown=pl.lit("by_turns"))
    cols = ["breakdown", *keys, "n_turns", "n_queries", "n_excluded", *metric_cols]
    parts = [overall.select(cols), by_turns.select(cols)]
    if "has_images" in joined.columns and (joined["modality"] == MULTIMODAL).any():
        parts.append(joined.filter(pl.col("has_images")).group_by(keys).agg(aggs)
                     .with_columns(breakdown=pl.lit("with_images"), n_turns=pl.lit(None, pl.Int64)).select(cols))
    order = {"overall": 0, "by_turns": 1, "with_images": 2}
    table = pl.concat(parts).with_columns(_o=pl.col("breakdown").replace_strict(order, return_dtype=pl.Int64)).sort(
        "_o", "input", "ranker", "modality", "n_turns", nulls_last=False).drop("_o")
    per_query = joined.filter(pl.col("usable")).select("run_id", *keys, "query_id", "facet_id", "n_turns",
                                                       *metric_cols)
    return table, per_query
