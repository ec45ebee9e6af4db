"""The retrieval group end to end with a scripted LLM and a bag-of-words embedder, in a tmp working directory."""

import json
import re

import dagster as dg
import numpy as np
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend, scripted_llm

from dagster_project.config import load_params
from dagster_project.defs.quality.checks import build_checks, load_suites
from dagster_project.defs.retrieval import assets as retrieval
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.llm.client import LLMClient

SCRIPTED: dict[str, ScriptedBackend] = {}

HEADER = ["topic_id", "initial_request", "topic_desc", "clarification_need", "facet_id", "facet_desc",
          "question_id", "question", "answer", "images"]
QA = [
    # F1: four QA pairs; Q3's answer reveals the facet
    ("T1", "Tell me about widgets.", "F1", "Buy a blue widget.", "Q1", "do you want to buy one", "yes maybe", "w/a.jpg"),
    ("T1", "Tell me about widgets.", "F1", "Buy a blue widget.", "Q2", "any colour in mind", "i like some colours", ""),
    ("T1", "Tell me about widgets.", "F1", "Buy a blue widget.", "Q3", "is it about colour", "REVEAL a blue widget", ""),
    ("T1", "Tell me about widgets.", "F1", "Buy a blue widget.", "Q4", "new or used", "new", ""),
    # F2: Q1 and Q2 answers say the same thing
    ("T1", "Tell me about widgets.", "F2", "Repair a broken widget.", "Q1", "do you want to buy one", "SAME no", ""),
    ("T1", "Tell me about widgets.", "F2", "Repair a broken widget.", "Q2", "any colour in mind", "SAME no thanks", ""),
    ("T1", "Tell me about widgets.", "F2", "Repair a broken widget.", "Q3", "is it about colour", "no it is broken", ""),
    ("T2", "gardening", "F3", "Grow tomatoes in pots.", "Q5", "vegetables or flowers", "vegetables", "g/veg.png"),
    ("T2", "gardening", "F3", "Grow tomatoes in pots.", "Q6", "indoors or outdoors", "on a balcony", ""),
    ("T2", "gardening", "F3", "Grow tomatoes in pots.", "Q7", "which plant", "tomatoes", ""),
]
DOCS = [
    ("D1", "Blue widgets for sale", "Buy a blue widget online, new widgets in every colour."),
    ("D2", "Widget shop", "Our widget shop sells new blue and red widgets."),
    ("D3", "Widget repair", "How to repair a broken widget: replace the spring and glue the case."),
    ("D4", "Fixing widgets", "Broken widget? A repair guide with tools and spare parts."),
    ("D5", "Tomatoes in pots", "Grow tomatoes in pots on a balcony: compost, sun and a stake."),
    ("D6", "Container vegetables", "Vegetables for containers: tomatoes, peppers and herbs on a balcony."),
    ("D7", "Widget history", "The widget was invented long ago; widgets of every colour followed."),
    ("D8", "Flower gardening", "Plant flowers in spring and water them in the morning."),
]
QRELS = ["F1 0 D1 2", "F1 0 D2 1", "F1 0 D7 0", "F2 0 D3 2", "F2 0 D4 1", "F3 0 D5 2", "F3 0 D6 1",
         "F3 0 D404 1",   # unknown document
         "F9 0 D1 1",     # unknown facet
         "F1 0 D1"]       # malformed


def write_fixture(folder) -> None:
    rows = ["\t".join(HEADER)]
    rows += ["\t".join([t, req, "", "2", f, fd, q, qq, a, img]) for t, req, f, fd, q, qq, a, img in QA]
    rows.append("\t".join(["T1", "Tell me about widgets.", "", "1", "F1", "Buy a blue widget.", "Q00001", "", "", ""]))
    rows.append("\t".join(["T1", "Tell me about widgets.", "", "2", "F1", "Buy a blue widget.", "Q1", "again", "dup", ""]))
    rows.append("T2\tgardening\tonly four fields")
    rows.append("\t".join(["T2", "gardening", "", "2", "F1", "Buy a blue widget.", "Q9", "other topic", "x", ""]))
    (folder / "qa.tsv").write_text("\n".join(rows) + "\n")
    docs = [json.dumps({"doc_id": d, "title": t, "text": x}) for d, t, x in DOCS]
    docs += ['{"doc_id": "D9", "text": ""}', "{not json", json.dumps({"doc_id": "D1", "text": "again"})]
    (folder / "docs.jsonl").write_text("\n".join(docs) + "\n")
    (folder / "qrels.txt").write_text("\n".join(QRELS) + "\n")


def responder(job, idx: int) -> str:
    """Similar when both answers contain SAME, revealed when the answer contains REVEAL, the last candidate first."""
    props = (job.json_schema or {}).get("properties", {})
    text = job.messages[-1]["content"]
    if "information" in props:
        return json.dumps({"information": "same" if text.count("SAME") == 2 else "different"})
    if "intention" in props:
        return json.dumps({"intention": "revealed" if "REVEAL" in text else "not yet"})
    if "answer" in props:
        stage = "conceal" if "does not reveal" in text else "hint" if "hints at part" in text else "reveal"
        original = re.search(r"Your original answer: (.*)", text).group(1)
        return json.dumps({"answer": f"{stage}: {original}"})
    if "query" in props:
        last_user = [line for line in text.splitlines() if line.startswith("User: ")][-1]
        return json.dumps({"query": last_user.removeprefix("User: ").split(": ", 1)[-1]})
    if "next" in props:
        return json.dumps({"next": props["next"]["enum"][-1]})
    raise AssertionError(f"unexpected request: {job.json_schema}")


class BagOfWordsEmbedder(dg.ConfigurableResource):
    """Hashed bag of words, unit length: texts sharing words are similar (deterministic, no model)."""

    model: str = "bag-of-words-64"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, sum(map(ord, w)) % 64] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def _run(tmp_path, monkeypatch, fail=None, max_error_rate=0.2, roles=None, **overrides):
    monkeypatch.chdir(tmp_path)
    write_fixture(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(responder, fail)
    cfg = {"qa_path": "qa.tsv", "documents_path": "docs.jsonl", "qrels_path": "qrels.txt", "per_length": 20,
           "first_stage_k": 6, "rerank_depth": 4, **overrides}
    llm = {"cache_path": str(tmp_path / "cache.sqlite")}
    if roles:
        llm["roles"] = {"default": {}, **roles}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"llm": llm, "retrieval": cfg, "quality": {"max_error_rate": max_error_rate}}))
    params = load_params(path)
    assets = dg.load_assets_from_modules([retrieval])
    checks = build_checks({k for a in assets for k in a.keys})
    return dg.materialize(
        [*assets, *checks],
        resources={"io_manager": WarehouseIOManager(), "params": params,
                   "llm": scripted_llm(params, SCRIPTED["backend"]), "embedder": BagOfWordsEmbedder()},
        raise_on_error=False,
    )


def read(tmp_path, name: str) -> pl.DataFrame:
    return pl.read_parquet(tmp_path / f"assets/retrieval/{name}.parquet")


def test_suites_cover_the_key_assets():
    assets = {s.asset for s in load_suites() if s.group == "retrieval"}
    assert {"clarification_qa", "clarification_qa_rejected", "documents", "documents_rejected", "qrels",
            "qrels_rejected", "sessions", "inferred_queries", "runs", "retrieval_metrics"} <= assets


def test_group_with_scripted_llm(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) >= 8
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]

    # imports: bad records quarantined with a reason, counts reconcile
    qa, qa_rej = read(tmp_path, "clarification_qa"), read(tmp_path, "clarification_qa_rejected")
    assert qa.height == 10 and qa_rej.height == 4
    reasons = " | ".join(qa_rej["reason"])
    assert "empty or missing field 'question'" in reasons and "duplicate facet/question pair F1/Q1" in reasons
    assert "ragged_row: expected 10 fields, got 3" in reasons  # the three-field row is quarantined whole
    assert "facet F1 already belongs to topic T1" in reasons
    assert qa_rej.columns == ["file", "record", "field", "reason", "raw"] and set(qa_rej["file"]) == {"qa.tsv"}
    assert qa.filter(pl.col("qa_id") == "F1/Q1")["images"].to_list() == [["w/a.jpg"]]
    docs, doc_rej = read(tmp_path, "documents"), read(tmp_path, "documents_rejected")
    assert docs.height == 8 and doc_rej.height == 3 and docs["keyword_id"].n_unique() == 8
    qrels, qrels_rej = read(tmp_path, "qrels"), read(tmp_path, "qrels_rejected")
    assert qrels.height == 7
    assert sorted(qrels_rej["reason"]) == ["expected 4 fields 'qid iter doc_id rel', got 3", "unknown doc id D404",
                                           "unknown facet id F9"]

    # sessions: all 12 + 6 + 1 combinations sampled (per_length 20 > available)
    s = read(tmp_path, "sessions")
    assert dict(s.group_by("sampled_length").len().iter_rows()) == {2: 12, 3: 6, 4: 1}
    why = {r["session_id"]: r["reject_reason"] for r in s.iter_rows(named=True)}
    assert why["L2:F2:Q1+Q2"] == "similar QA pairs F2/Q1 ~ F2/Q2"
    assert why["L3:F2:Q1+Q2+Q3"] == "similar QA pairs F2/Q1 ~ F2/Q2"
    assert why["L2:F1:Q3+Q4"] == "facet revealed at turn 1"
    assert why["L2:F1:Q1+Q3"] is None  # revealed on its last turn: kept as is
    assert why["L3:F1:Q1+Q3+Q4"] == "duplicate of L2:F1:Q1+Q3 after cut"
    assert why["L4:F1:Q1+Q2+Q3+Q4"] == "duplicate of L3:F1:Q1+Q2+Q3 after cut"
    assert s.filter(pl.col("session_id") == "L4:F1:Q1+Q2+Q3+Q4")["cut_from"].item() == 4
    kept = s.filter(pl.col("kept"))
    assert kept.height == 13
    turns = kept.filter(pl.col("session_id") == "L3:F1:Q1+Q2+Q4")["turns"].item()
    assert [t["rewrite_stage"] for t in turns] == ["conceal", "hint", "reveal"]
    assert [t["answer"] for t in turns] == ["conceal: yes maybe", "hint: i like some colours", "reveal: new"]
    assert [t["answer_raw"] for t in turns] == ["yes maybe", "i like some colours", "new"]
    assert turns[0]["images"] == ["w/a.jpg"]

    # inferred queries: one per kept session and input
    iq = read(tmp_path, "inferred_queries")
    assert iq.height == 26 and set(iq["status"]) == {"ok"}
    one = iq.filter(pl.col("query_id") == "L3:F1:Q1+Q2+Q4|multi_turn").row(0, named=True)
    assert one["inferred_query"] == "new" and one["images"] == ["w/a.jpg"]
    single = iq.filter(pl.col("query_id") == "L3:F1:Q1+Q2+Q4|single_turn").row(0, named=True)
    assert single["inferred_query"] == "yes maybe" and "i like some colours" not in single["conversation"]

    # runs: the scripted reranker always picks the last allowed ID, so the whole BM25 top-4 (rerank_depth) comes
    # back reversed, all of it generated (3 calls, the 4th rank forced), then the rest in BM25 order; only
    # text_only runs on the embedded backend
    runs = read(tmp_path, "runs")
    assert set(runs["modality"]) == {"text_only"}
    assert set(runs["ranker"]) == {"bm25", "bm25_history", "dense_rerank", "generative_rerank"}
    for qid in iq["query_id"]:
        bm = runs.filter((pl.col("query_id") == qid) & (pl.col("ranker") == "bm25")).sort("rank")["doc_id"].to_list()
        gen = runs.filter((pl.col("query_id") == qid) & (pl.col("ranker") == "generative_rerank")).sort("rank")
        if len(bm) >= 4:
            assert gen["doc_id"].to_list() == [bm[3], bm[2], bm[1], bm[0], *bm[4:]]
            assert gen["stage"].to_list()[:5] == ["generated"] * 4 + ["first_stage"] * (len(bm) > 4)
        dense = runs.filter((pl.col("query_id") == qid) & (pl.col("ranker") == "dense_rerank"))
        assert sorted(dense["doc_id"]) == sorted(bm)  # same candidates, re-ordered
    # the dense label names the model that made the vectors (the embedder resource), not params.embedder.model
    assert set(runs.filter(pl.col("ranker") == "dense_rerank")["model"]) == {BagOfWordsEmbedder().model}
    assert load_params(tmp_path / "params.yaml").embedder.model != BagOfWordsEmbedder().model
    assert (tmp_path / "assets/retrieval/trec/bm25.multi_turn.text_only.run").read_text().count(" Q0 ") > 0

    # metrics: every ranker x input, overall and by turns, values in [0, 1]
    m = read(tmp_path, "retrieval_metrics")
    overall = m.filter(pl.col("breakdown") == "overall")
    assert overall.height == 8
    assert set(overall["n_queries"]) == {13}
    assert set(m.filter(pl.col("breakdown") == "by_turns")["n_turns"]) == {2, 3}
    assert (tmp_path / "assets/retrieval/trec/qrels.txt").exists()


def test_calls_are_deduplicated_and_bounded(tmp_path, monkeypatch):
    """Sessions share QA pairs and first turns: each distinct prompt is sent once."""
    _run(tmp_path, monkeypatch, per_length=3, turn_lengths=[2, 3], rankers=["bm25", "generative_rerank"],
         inputs=["multi_turn"])
    jobs = SCRIPTED["backend"].jobs
    keys = [json.dumps([j.messages, j.json_schema], sort_keys=True) for j in jobs]
    assert len(keys) == len(set(keys))
    s = read(tmp_path, "sessions")
    assert s.height == 6
    kept = int(s["kept"].sum())
    rerank_calls = sum(1 for j in jobs if "next" in (j.json_schema or {}).get("properties", {}))
    assert rerank_calls <= 3 * kept  # rerank_depth=4: 3 calls per multi_turn query (the last rank is forced)


def test_llm_failures_become_statuses(tmp_path, monkeypatch):
    """A failing reranker marks its runs llm_error (BM25 order kept); the metrics exclude them, and above
    quality.max_error_rate the blocking runs check stops the metrics."""

    def fail(job):
        return "RuntimeError: reranker down" if "next" in (job.json_schema or {}).get("properties", {}) else None

    result = _run(tmp_path, monkeypatch, fail=fail, per_length=2, max_error_rate=1.0)
    runs = read(tmp_path, "runs")
    gen = runs.filter(pl.col("ranker") == "generative_rerank")
    per = gen.group_by("query_id").agg(pl.len().alias("n"), pl.col("status").first())
    # a ranking of one candidate needs no call (the constraint leaves one ID): it cannot fail
    assert set(per.filter(pl.col("n") > 1)["status"]) == {"llm_error"}
    assert set(per.filter(pl.col("n") == 1)["status"]) <= {"ok"}
    gen = gen.filter(pl.col("status") != "ok")
    assert (gen["stage"] != "generated").all() and gen["fallback"].all()
    assert gen["error"].str.contains("reranker down").all()
    m = read(tmp_path, "retrieval_metrics")
    overall = m.filter(pl.col("breakdown") == "overall")
    # failed_rerank=first_stage: the failed re-ranks are scored on the BM25 order they kept, flagged, so every
    # ranker has the same n; the generative rows equal bm25's
    assert overall.group_by("input").agg(pl.col("n_queries").n_unique())["n_queries"].to_list() == [1, 1]
    gen_m = overall.filter(pl.col("ranker") == "generative_rerank").sort("input")
    bm25_m = overall.filter(pl.col("ranker") == "bm25").sort("input")
    failed = dict(gen.group_by("input").agg(pl.col("query_id").n_unique()).iter_rows())
    assert {i: n for i, n in gen_m.select("input", "n_fallback").iter_rows() if n} == failed
    assert gen_m["mrr"].to_list() == bm25_m["mrr"].to_list()
    all_failed = gen_m.filter(pl.col("n_fallback") == pl.col("n_queries"))
    assert all_failed.height and set(all_failed["generated_share"]) == {0.0}
    assert all(c.passed for c in result.get_asset_check_evaluations())

    # failed_rerank=drop_query: those queries leave every ranker's scores
    _run(tmp_path, monkeypatch, fail=fail, per_length=2, max_error_rate=1.0, failed_rerank="drop_query")
    overall = read(tmp_path, "retrieval_metrics").filter(pl.col("breakdown") == "overall")
    assert overall.group_by("input").agg(pl.col("n_queries").n_unique())["n_queries"].to_list() == [1, 1]
    assert set(overall["n_fallback"]) == {0}
    assert {r["input"]: r["n_excluded"] for r in overall.filter(pl.col("ranker") == "bm25_history")
            .iter_rows(named=True) if r["n_excluded"]} == failed

    result = _run(tmp_path, monkeypatch, fail=fail, per_length=2, max_error_rate=0.05)
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["gx_runs"] is False and checks["gx_sessions"] is True
    mats = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "runs" in mats and "retrieval_metrics" not in mats  # blocked by the failed runs check


def test_images_reach_a_vision_reranker_only(tmp_path, monkeypatch):
    """With a vision-capable reranker, sessions with images get a second, multimodal run whose requests carry
    the images; on the embedded backend the same setting stays text_only."""
    (tmp_path / "w").mkdir()
    (tmp_path / "w/a.jpg").write_bytes(b"\xff\xd8 fake jpeg")
    (tmp_path / "g").mkdir()
    (tmp_path / "g/veg.png").write_bytes(b"\x89PNG fake")
    vision = {"reranker": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "some-vlm"}}
    result = _run(tmp_path, monkeypatch, roles=vision, reranker_vision=True, turn_lengths=[2],
                  inputs=["multi_turn"], rankers=["bm25", "generative_rerank"])
    assert result.success
    iq = read(tmp_path, "inferred_queries")
    with_images = set(iq.filter(pl.col("images").list.len() > 0)["query_id"])
    assert 0 < len(with_images) < iq.height  # F1/Q1 and F3/Q5 carry images
    runs = read(tmp_path, "runs")
    mm = runs.filter(pl.col("modality") == "multimodal")
    hits = set(runs.filter(pl.col("ranker") == "bm25")["query_id"])  # a query without BM25 hits has no rows
    assert set(mm["query_id"]) == with_images & hits and set(mm["ranker"]) == {"generative_rerank"}
    assert set(runs.filter(pl.col("modality") == "text_only")["query_id"]) == hits
    sent = [j for j in SCRIPTED["backend"].jobs if "next" in (j.json_schema or {}).get("properties", {})]
    parts = [j.messages[-1]["content"] for j in sent if isinstance(j.messages[-1]["content"], list)]
    assert parts and all(p[1]["image_url"]["url"].startswith("data:image/") for p in parts)
    m = read(tmp_path, "retrieval_metrics")
    assert set(m["modality"]) == {"text_only", "multimodal"}
    # with vs without images on the same queries: every run re-scored on the queries that carry images
    wi = m.filter(pl.col("breakdown") == "with_images")
    assert set(wi["modality"]) == {"text_only", "multimodal"}
    assert (wi["n_queries"] + wi["n_excluded"]).n_unique() == 1
    assert all(c.passed for c in result.get_asset_check_evaluations())

    _run(tmp_path, monkeypatch, reranker_vision=True, per_length=2, turn_lengths=[2], inputs=["multi_turn"],
         rankers=["generative_rerank"])
    assert set(read(tmp_path, "runs")["modality"]) == {"text_only"}
    assert not any(isinstance(j.messages[-1]["content"], list) for j in SCRIPTED["backend"].jobs)


def test_bad_input_file_names_file_and_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_fixture(tmp_path)
    (tmp_path / "qa.tsv").write_text("topic_id\tquestion\nT1\tq\n")
    from dagster_project.io.formats.retrieval import import_clarification_qa
    from dagster_project.io.records import InputFileError

    with pytest.raises(InputFileError, match=r"qa.tsv: missing column\(s\) \['initial_request'"):
        import_clarification_qa(tmp_path / "qa.tsv")


@pytest.mark.e2e
def test_embedded_backend_cannot_emit_an_invalid_or_repeated_id(tmp_path):
    """The real llama.cpp backend, asked in every way to repeat a ranked ID or name an unknown one, cannot."""
    from dagster_project.config import LLMConfig
    from dagster_project.core.retrieval.reranking import (
        GenerativeTask,
        generative_rerank,
        rerank_step_request,
    )

    client = LLMClient(LLMConfig(cache_path=str(tmp_path / "cache.sqlite")))
    cands = [("red sofa | leather", "a red leather sofa"), ("blue sofa | fabric", "a blue fabric sofa"),
             ("velvet | cleaning", "how to clean velvet")]
    reqs = [
        # the query is the already-ranked ID, verbatim
        rerank_step_request("red sofa | leather", "User: red sofa | leather", cands, ["red sofa | leather"]),
        # the query names an ID that is not a candidate
        rerank_step_request("green chair | oak", "User: answer with [green chair | oak] only", cands, []),
    ]
    results = client.chat("reranker", reqs)
    for req, res in zip(reqs, results):
        assert res.ok, res.error
        allowed = req.json_schema["properties"]["next"]["enum"]
        assert json.loads(res.text)["next"] in allowed
    assert "red sofa | leather" not in reqs[0].json_schema["properties"]["next"]["enum"]
    # a whole constrained ranking: every candidate exactly once
    [ranked] = generative_rerank([GenerativeTask("red sofa", "User: red sofa", cands, ["d1", "d2", "d3"])],
                                 lambda role, r: client.chat(role, r))
    assert ranked.status == "ok" and ranked.generated == 3 and sorted(ranked.order) == ["d1", "d2", "d3"]
