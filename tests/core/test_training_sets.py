"""core/training: exports -> TRL rows (prompt/completion per assistant turn, preference triples), the data hash,
the intents sweep cut and the re-ranker triplets / held-out rankings. Pure: no model, no Dagster."""

import numpy as np
import polars as pl
import pytest

from dagster_project.core.intents.curation import TRAINING_SCHEMA
from dagster_project.core.training.formats import (
    data_sha256,
    trl_dpo_rows,
    trl_sft_rows,
)
from dagster_project.core.training.sets import (
    intents_at_percentile,
    kept_messages,
    percentile_tag,
    rank_by_embedding,
    rerank_candidates,
    reranker_triplets,
)
from dagster_project.io.records import InputFileError


def m(role, content):
    return {"role": role, "content": content}


def test_sft_rows_one_completion_per_assistant_turn_with_its_history():
    rec = {"messages": [m("system", "S"), m("user", "book a table"), m("assistant", "For how many?"),
                        m("user", "two"), m("assistant", "book_table")]}
    rows = trl_sft_rows([rec], "x.jsonl")
    assert rows == [
        {"prompt": [m("system", "S"), m("user", "book a table")], "completion": [m("assistant", "For how many?")]},
        {"prompt": rec["messages"][:4], "completion": [m("assistant", "book_table")]},
    ]


def test_sft_rows_keep_prompt_completion_records_and_skip_assistant_turns_before_any_user():
    pc = {"prompt": [m("user", "q")], "completion": [m("assistant", "a")]}
    demo_first = {"messages": [m("assistant", "hello"), m("user", "q"), m("assistant", "a")]}
    assert trl_sft_rows([pc], "s") == [pc]
    assert trl_sft_rows([demo_first], "s") == [{"prompt": demo_first["messages"][:2], "completion": [m("assistant", "a")]}]


@pytest.mark.parametrize("record, field, problem", [
    ({"messages": [m("user", "q")]}, "messages", "no assistant message"),
    ({"messages": [m("user", "q"), m("bot", "a")]}, "messages[1]", "role"),
    ({"messages": [m("user", "q"), m("assistant", " ")]}, "messages[1]", "non-empty"),
    ({"text": "q"}, None, "no `messages`"),
])
def test_sft_rows_name_the_export_record_and_field_of_a_bad_row(record, field, problem):
    good = {"messages": [m("user", "q"), m("assistant", "a")]}
    with pytest.raises(InputFileError) as err:
        trl_sft_rows([good, record], "annotations/sft_dataset")
    assert err.value.file == "annotations/sft_dataset" and err.value.record == 2 and err.value.field == field
    assert problem in str(err.value)


def test_dpo_rows_validate_and_leave_out_identical_sides():
    rec = {"prompt": [m("user", "q")], "chosen": [m("assistant", "ask")], "rejected": [m("assistant", "answer")]}
    assert trl_dpo_rows([rec], "d") == ([rec], [])
    with pytest.raises(InputFileError, match="record 1.*'rejected'"):
        trl_dpo_rows([{**rec, "rejected": []}], "d")
    assert trl_dpo_rows([rec, {**rec, "rejected": rec["chosen"]}], "d") == ([rec], [2])  # no preference: left out


def test_data_hash_is_stable_and_changes_with_any_row():
    rows = trl_sft_rows([{"messages": [m("user", "q"), m("assistant", "a")]}], "s")
    assert data_sha256(rows) == data_sha256([dict(r) for r in rows])
    assert data_sha256(rows) != data_sha256(trl_sft_rows([{"messages": [m("user", "q"), m("assistant", "b")]}], "s"))
    assert data_sha256(rows) != data_sha256(rows + rows)


def _training(sdrs_outcomes):
    rows = []
    for i, (sdrs, outcome) in enumerate(sdrs_outcomes):
        rows.append({"conversation_id": f"c{i}", "kind": "ambiguous", "label_dropout": False, "sdrs": sdrs,
                     "outcome": outcome, "kept": False, "messages": [m("user", f"u{i}"), m("assistant", f"i{i}")]})
    rows.append({"conversation_id": "c0-dropout", "kind": "unambiguous", "label_dropout": True, "sdrs": None,
                 "outcome": None, "kept": True, "messages": [m("user", "x"), m("assistant", "out of domain")]})
    return pl.DataFrame(rows, schema={k: TRAINING_SCHEMA[k] for k in rows[0]})


def test_intents_sweep_recuts_by_sdrs_and_always_adds_the_label_dropout_rows():
    t = _training([(0.9, "correct"), (0.8, "correct"), (0.7, "wrong_intent"), (0.2, "correct")])
    users = lambda recs: [r["messages"][0]["content"] for r in recs]
    assert users(intents_at_percentile(t, 100, True)) == ["u0", "x", "u1", "u3"]  # c2 wrong: removed
    assert users(intents_at_percentile(t, 100, False)) == ["u0", "x", "u1", "u2", "u3"]
    assert users(intents_at_percentile(t, 50, True)) == ["u0", "x", "u1"]  # ceil(4 * .5) = 2 by SDRS
    assert users(intents_at_percentile(t, 25, True)) == ["u0", "x"]
    assert users(kept_messages(t)) == ["x"]  # the export's own cut: only rows marked kept
    assert percentile_tag(85.0) == "p85" and percentile_tag(87.5) == "p87.5"


def _reranker_examples():
    rows = [
        {"example_id": "q1|d1", "query_text": "red shoes", "split": "train", "kept": True, "positive_doc_id": "d1",
         "negative_doc_ids": ["d2", "d3"], "candidate_doc_ids": ["d2", "d1", "d3"]},
        {"example_id": "q2|d3", "query_text": "blue hat", "split": "test", "kept": True, "positive_doc_id": "d3",
         "negative_doc_ids": ["d1"], "candidate_doc_ids": ["d1", "d3"]},
        {"example_id": "q3|none", "query_text": "x", "split": "test", "kept": False, "positive_doc_id": None,
         "negative_doc_ids": [], "candidate_doc_ids": []},
    ]
    return pl.DataFrame(rows)


DOCS = {"d1": "red running shoes", "d2": "green socks", "d3": "a blue hat"}


def test_reranker_triplets_use_the_hardest_bm25_negative_of_train_rows_only():
    assert reranker_triplets(_reranker_examples(), DOCS) == [
        {"anchor": "red shoes", "positive": "red running shoes", "negative": "green socks"}]


def test_rerank_candidates_and_embedding_ranking():
    qrels, queries, cands = rerank_candidates(_reranker_examples(), DOCS, "test")
    assert qrels == {"q2|d3": {"d3": 1}} and queries == {"q2|d3": "blue hat"} and cands == {"q2|d3": ["d1", "d3"]}
    vec = {"blue hat": [0.0, 1.0], "a blue hat": [0.0, 1.0], "red running shoes": [1.0, 0.0]}
    encode = lambda texts: np.array([vec[t] for t in texts])
    assert rank_by_embedding(encode, queries, cands, DOCS) == {"q2|d3": ["d3", "d1"]}
    assert rank_by_embedding(encode, {}, {}, DOCS) == {}
