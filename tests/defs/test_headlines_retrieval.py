"""headlines/retrieval_headline on hand-made runs: every ranker (the fine-tuned and the yes/no generative ones
included) on the same test-split queries only, at one re-ranking depth, n per row, text-only rows when no image
reached a model, the paper's rows."""

import json
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from dagster_project.config import parse_params
from dagster_project.core.retrieval import yes_no
from dagster_project.core.retrieval.headline import YES_NO_BASE, YES_NO_LORA
from dagster_project.core.retrieval.rankers import RUN_SCHEMA
from dagster_project.defs.headlines import assets as headline_assets
from dagster_project.defs.headlines import retrieval as headline
from dagster_project.defs.quality.checks import load_suites, validate_frame
from dagster_project.lib.catalog import describe
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.training.model_folder import RESULT_SCHEMA

DOCS = {"d1": "shoes for running", "d2": "alpha guide", "d3": "beta manual", "d4": "gamma notes"}
# query -> (facet, split, relevant doc, query text)
QUERIES = {"t1": ("fA", "test", "d2", "alpha"), "t2": ("fB", "test", "d3", "beta"),
           "r1": ("fC", "train", "d1", "shoes")}


def _rows(qid, ranker, order, stage):
    return [{c: None for c in RUN_SCHEMA} | {
        "query_id": qid, "session_id": qid, "input": "multi_turn", "facet_id": QUERIES[qid][0], "n_turns": 2,
        "ranker": ranker, "modality": "text_only", "run_id": f"{ranker}/multi_turn/text_only", "rank": r, "doc_id": d,
        "score": 10.0 - r, "stage": stage, "query_text": QUERIES[qid][3], "status": "ok", "fallback": False}
        for r, d in enumerate(order, start=1)]


def encode(texts):
    """Bag of words over the documents' first words: the fine-tuned model matches a query to its document."""
    vocab = ["shoes", "alpha", "beta", "gamma"]
    v = np.array([[1.0 if w in t.split() else 0.01 for w in vocab] for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_every_ranker_on_the_test_split_at_one_depth(monkeypatch):
    monkeypatch.setattr(headline, "encoder", lambda folder: encode)
    bm25 = ["d1", "d2", "d3", "d4"]
    runs = []
    for q in QUERIES:
        runs += _rows(q, "bm25", bm25, "first_stage") + _rows(q, "dense_rerank", ["d2", "d1", "d3", "d4"], "dense")
        runs += _rows(q, "generative_rerank", bm25, "generated")
    inferred = pl.DataFrame([{"query_id": q, "facet_id": f, "n_turns": 2, "images": [], "status": "ok",
                              "input": "multi_turn"} for q, (f, _, _, _) in QUERIES.items()],
                            schema_overrides={"images": pl.List(pl.Utf8)})
    training = pl.DataFrame([{"facet_id": f, "split": s} for f, s, _, _ in QUERIES.values()])
    qrels = pl.DataFrame([{"qid": f, "doc_id": d, "rel": 1} for f, _, d, _ in QUERIES.values()])
    documents = pl.DataFrame([{"doc_id": d, "title": None, "text": t, "keyword_id": d} for d, t in DOCS.items()],
                             schema_overrides={"title": pl.Utf8})
    tuned = pl.DataFrame([{"model": "reranker_finetuned", "status": "trained", "folder": "assets/training/rf"}],
                         schema=RESULT_SCHEMA)
    params = parse_params({"retrieval": {"rankers": ["bm25", "dense_rerank", "generative_rerank"],
                                         "inputs": ["multi_turn"], "first_stage_k": 4, "rerank_depth": 2,
                                         "ks": [1, 3]}})
    out, _ = headline.headline_table(params, pl.DataFrame(runs, schema=RUN_SCHEMA), qrels, inferred, training,
                                     documents, {"reranker_finetuned": tuned})
    assert not [c for c in out.columns if not describe("headlines/retrieval_headline", c)]
    suite = next(s for s in load_suites() if (s.group, s.asset) == ("headlines", "retrieval_headline"))
    ok, results = validate_frame(out, suite, params)
    assert ok, results
    ours = out.filter((pl.col("system") == "ours") & (pl.col("breakdown") == "overall"))
    rows = {r["ranker"]: r for r in ours.iter_rows(named=True)}
    assert set(rows) == {"bm25", "dense_rerank", "generative_rerank", "finetuned_rerank"}
    assert all(r["n_queries"] == 2 and r["split"] == "test" and r["rerank_depth"] == 2 for r in rows.values())
    assert all(r["images_sent"] == 0 and r["modality"] == "text_only" for r in rows.values())
    # t1: d2 at BM25 rank 2 (inside the depth) moves to rank 1; t2: d3 at rank 3 stays there
    assert rows["finetuned_rerank"]["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert rows["bm25"]["mrr"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert rows["finetuned_rerank"]["compared_with"] == "dense_rerank" and rows["finetuned_rerank"]["n_paired"] == 2
    assert rows["finetuned_rerank"]["verdict"].startswith("not significant: too few")
    assert rows["bm25"]["verdict"] is None
    published = out.filter(pl.col("system") == "published")
    assert published.height == 14 and published.filter(pl.col("ranker") == "Mario")["modality"].to_list() == [
        "multimodal", "multimodal"]
    # no fine-tuned model: the other rankers stay, each on the same test queries
    skipped = tuned.with_columns(status=pl.lit("skipped_no_data"), folder=pl.lit(None, pl.Utf8))
    out, _ = headline.headline_table(params, pl.DataFrame(runs, schema=RUN_SCHEMA), qrels, inferred, training,
                                     documents, {"reranker_finetuned": skipped})
    assert "finetuned_rerank" not in out["ranker"].to_list()


def _inputs() -> dict[str, pl.DataFrame]:
    """The retrieval tables of the test above (BM25 d1 d2 d3 d4 for every query), with conversations."""
    runs = [row for q in QUERIES for row in _rows(q, "bm25", ["d1", "d2", "d3", "d4"], "first_stage")]
    inferred = pl.DataFrame([{"query_id": q, "facet_id": f, "n_turns": 2, "images": [], "status": "ok",
                              "input": "multi_turn", "conversation": f"User: tell me about {text}"}
                             for q, (f, _, _, text) in QUERIES.items()], schema_overrides={"images": pl.List(pl.Utf8)})
    return {"runs": pl.DataFrame(runs, schema=RUN_SCHEMA),
            "qrels": pl.DataFrame([{"qid": f, "doc_id": d, "rel": 1} for f, _, d, _ in QUERIES.values()]),
            "inferred_queries": inferred,
            "reranker_training": pl.DataFrame([{"facet_id": f, "split": s} for f, s, _, _ in QUERIES.values()]),
            "documents": pl.DataFrame([{"doc_id": d, "title": None, "text": t, "keyword_id": d}
                                       for d, t in DOCS.items()], schema_overrides={"title": pl.Utf8})}


def _yes_no_model(root) -> pl.DataFrame:
    """A training/reranker_generative folder as the training group leaves it (training.json + adapter/), and its
    training table row."""
    folder = root / "assets/training/reranker_generative"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter/adapter_config.json").write_text("{}")
    (folder / "training.json").write_text(json.dumps({"base_model": "/models/smollm2-hf",
                                                      "template": yes_no.template().record()}))
    return pl.DataFrame([{"model": "reranker_generative", "status": "trained", "folder": str(folder)}],
                        schema=RESULT_SCHEMA)


def _judge(model, prompts_seen):
    """Scores a fake served model gives: the base says the same for every candidate (ties keep the BM25 order); the
    LoRA model says yes (1.0) when the query's word is in the document."""
    def score(prompts):
        prompts_seen.extend(prompts)
        if not model.adapters:
            return [0.0] * len(prompts)
        out = []
        for p in prompts:
            user = p[-1]["content"]
            query = user.split("What the user is looking for: ")[1].split("\n")[0]
            document = user.split("Document:\n")[1].split("\n")[0]
            out.append(1.0 if query in document.split() else -1.0)
        return out
    return score


def _materialize(params, tables, trained):
    """retrieval_headline as Dagster runs it, its inputs read from Parquet by the warehouse IO manager."""
    for name, frame in [*tables.items(), *trained.items()]:
        group = "training" if name in trained else "retrieval"
        (Path("assets") / group).mkdir(parents=True, exist_ok=True)
        frame.write_parquet(Path("assets") / group / f"{name}.parquet")
    a = headline.retrieval_headline_asset(params)
    result = dg.materialize([a, *(dg.SourceAsset(k) for k in a.dependency_keys)],
                            resources={"io_manager": WarehouseIOManager(), "params": params})
    assert result.success
    return pl.read_parquet("assets/headlines/retrieval_headline.parquet"), result


def test_no_test_split_session_is_said_in_the_metadata():
    """Sessions only on train facets (the demo's 6 sessions at seed 0 were): no rows of ours, and the metadata says
    why and which params key to change."""
    bm25 = ["d1", "d2", "d3", "d4"]
    runs = [row for q in QUERIES for row in _rows(q, "bm25", bm25, "first_stage")]
    inferred = pl.DataFrame([{"query_id": q, "facet_id": f, "n_turns": 2, "images": [], "status": "ok",
                              "input": "multi_turn"} for q, (f, _, _, _) in QUERIES.items()],
                            schema_overrides={"images": pl.List(pl.Utf8)})
    training = pl.DataFrame([{"facet_id": f, "split": "train"} for f, _, _, _ in QUERIES.values()])
    qrels = pl.DataFrame([{"qid": f, "doc_id": d, "rel": 1} for f, _, d, _ in QUERIES.values()])
    documents = pl.DataFrame([{"doc_id": d, "title": None, "text": t, "keyword_id": d} for d, t in DOCS.items()],
                             schema_overrides={"title": pl.Utf8})
    params = parse_params({"retrieval": {"rankers": ["bm25"], "inputs": ["multi_turn"], "first_stage_k": 4,
                                         "rerank_depth": 2, "ks": [1, 3]}})
    out, meta = headline.headline_table(params, pl.DataFrame(runs, schema=RUN_SCHEMA), qrels, inferred, training,
                                        documents, {})
    assert out.filter(pl.col("system") == "ours").is_empty() and meta["test_queries"] == 0
    assert "retrieval.per_length" in meta["note"]


def test_the_yes_no_reranker_and_its_base_join_with_the_same_n_at_the_same_depth(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    served, prompts = [], []
    monkeypatch.setattr(headline, "scorer", lambda model, params: served.append(model) or _judge(model, prompts))
    params = parse_params({"retrieval": {"rankers": ["bm25"], "inputs": ["multi_turn"], "first_stage_k": 4,
                                         "rerank_depth": 2, "ks": [1, 3]},
                           "training": {"models": ["reranker_generative"]}})
    out, result = _materialize(params, _inputs(), {"reranker_generative": _yes_no_model(tmp_path)})
    suite = next(s for s in load_suites() if (s.group, s.asset) == ("headlines", "retrieval_headline"))
    ok, results = validate_frame(out, suite, params)
    assert ok, results
    ours = out.filter((pl.col("system") == "ours") & (pl.col("breakdown") == "overall"))
    rows = {r["ranker"]: r for r in ours.iter_rows(named=True)}
    assert set(rows) == {"bm25", YES_NO_BASE, YES_NO_LORA}
    assert all(r["n_queries"] == 2 and r["rerank_depth"] == 2 and r["split"] == "test" for r in rows.values())
    assert all(r["modality"] == "text_only" and r["images_sent"] == 0 for r in rows.values())
    # t1 "alpha": d2 inside the depth moves to rank 1; t2 "beta": d3 at BM25 rank 3 is below the depth, stays there
    assert rows[YES_NO_LORA]["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert rows[YES_NO_BASE]["mrr"] == pytest.approx(rows["bm25"]["mrr"])  # all ties: the BM25 order
    assert rows[YES_NO_LORA]["compared_with"] == YES_NO_BASE and rows[YES_NO_LORA]["n_paired"] == 2
    # the base is the one the adapter was trained on; only the depth's candidates of the test queries are judged
    assert [(m.weights, len(m.adapters)) for m in served] == [("/models/smollm2-hf", 0), ("/models/smollm2-hf", 1)]
    assert len(prompts) == 2 * 2 * 2 and "User: tell me about alpha" in prompts[0][-1]["content"]
    [event] = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert meta["yes_no"].value == "training/reranker_generative and its base"


def test_no_yes_no_rows_when_the_model_was_not_trained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(headline, "scorer", lambda model, params: pytest.fail("nothing should be scored"))
    params = parse_params({"retrieval": {"rankers": ["bm25"], "inputs": ["multi_turn"], "first_stage_k": 4,
                                         "rerank_depth": 2, "ks": [1, 3]}})
    skipped = pl.DataFrame([{"model": "reranker_generative", "status": "skipped_no_data",
                             "reason": "retrieval/reranker_training has no training rows"}], schema=RESULT_SCHEMA)
    out, meta = headline.headline_table(params, *_inputs().values(), {"reranker_generative": skipped})
    assert set(out.filter(pl.col("system") == "ours")["ranker"]) == {"bm25"}
    assert meta["yes_no"] == ("training/reranker_generative: skipped_no_data (retrieval/reranker_training has no "
                              "training rows)")


def test_the_headline_reads_the_training_tables_of_the_rerankers_params_builds():
    for models in (["reranker_finetuned"], ["reranker_generative"], ["reranker_finetuned", "reranker_generative"]):
        defs = headline_assets.build(parse_params({"training": {"models": models}}))
        [a] = [a for a in defs.assets if a.key.to_user_string() == "headlines/retrieval_headline"]
        assert {k.to_user_string() for k in a.dependency_keys if k.path[0] == "training"} == {
            f"training/{m}" for m in models}
    defs = headline_assets.build(parse_params({"training": {"models": ["clarilm_sft"]}}))
    assert "headlines/retrieval_headline" not in {a.key.to_user_string() for a in defs.assets}
