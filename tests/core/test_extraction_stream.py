"""log_clarifications' extraction, batch by batch (core/clarilm/extraction.extract_stream): logs.max_extractions
counts across batches, the rest become `skipped` rows, every batch comes out in the table's one schema."""

from __future__ import annotations

import json
from datetime import date

import polars as pl
import pytest

from dagster_project.config import LogsConfig
from dagster_project.core.clarilm.extraction import EXTRACTION_COLUMNS, extract_stream
from dagster_project.llm.chat import ChatResult

REPLY = json.dumps({"is_clarification": True, "query": "q", "clarifying_question": "Where to?",
                    "refined_query": "r", "facet": "where"})


def candidates(start: int, n: int) -> pl.DataFrame:
    return pl.DataFrame([{"candidate_id": f"c{i:03d}:1", "conversation_id": f"c{i:03d}", "turn_index": 1,
                          "source": "assistant_asked", "log_file": "f", "log_date": date(2024, 1, 1),
                          "query": "Plan a trip.", "clarifying_question": "Where to?", "reply": "Japan."}
                         for i in range(start, start + n)])


@pytest.mark.parametrize(("limit", "extracted"), [(None, 7), (4, 4), (3, 3), (1, 1)])
def test_the_cap_spans_batches_and_the_rest_is_skipped(limit, extracted):
    sent = []

    def chat(role, reqs):
        sent.extend(reqs)
        return [ChatResult(texts=[REPLY], model="m") for _ in reqs]

    cfg = LogsConfig(max_extractions=limit)
    parts = list(extract_stream(chat, [candidates(0, 3), candidates(3, 3), candidates(6, 1)], cfg))
    assert all(dict(p.schema) == EXTRACTION_COLUMNS for p in parts)
    out = pl.concat(parts)
    assert out["candidate_id"].to_list() == [f"c{i:03d}:1" for i in range(7)]  # order kept, nothing lost
    assert len(sent) == extracted
    assert out["status"].to_list() == ["ok"] * extracted + ["skipped"] * (7 - extracted)
    skipped = out.filter(pl.col("status") == "skipped")
    assert (skipped["reject_reason"] == "skipped").all() and not skipped["kept"].any()
    assert skipped["error"].to_list() == [f"over logs.max_extractions={limit}"] * (7 - extracted)


def test_no_candidates_no_rows_no_calls():
    assert list(extract_stream(lambda role, reqs: pytest.fail("called"), [], LogsConfig())) == []
