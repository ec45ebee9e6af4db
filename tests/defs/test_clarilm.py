"""ClariLM groups (logs -> questions -> facets -> annotations) with a scripted LLM and a fake embedder."""

import json
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import yaml
from fakes import ScriptedBackend, scripted_llm

from dagster_project.config import load_params
from dagster_project.core.clarilm.logs import days_to_ingest
from dagster_project.defs.annotations import assets as annotations
from dagster_project.defs.facets import assets as facets
from dagster_project.defs.logs import assets as logs
from dagster_project.defs.logs.partitions import range_tags, register_days
from dagster_project.defs.quality.checks import build_checks, load_suite, validate_frame
from dagster_project.defs.questions import assets as questions
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import read_asset
from dagster_project.llm.backends.base import Job

REPO = Path(__file__).resolve().parents[2]
SCRIPTED: dict[str, ScriptedBackend] = {}


class WordEmbedder(dg.ConfigurableResource):
    """Bag-of-words vectors over a hashed vocabulary: texts with the same words are identical vectors."""

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in "".join(c if c.isalnum() else " " for c in t.lower()).split():
                out[i, sum(map(ord, w)) % 512] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def _user(job: Job) -> str:
    return job.messages[-1]["content"]


def clarilm_responder(job: Job, idx: int) -> str:
    """Plausible replies for every ClariLM prompt, keyed by the schema's fields."""
    props = (job.json_schema or {}).get("properties", {})
    text = _user(job)
    if "is_clarification" in props:  # extraction: an exchange is a clarification when the reply is short
        reply = text.split('q_next: "')[-1].split('"')[0]
        ok = len(reply.split()) >= 3 and not reply.lower().startswith(("yes", "no", "what", "tell"))
        # user_refinement: the model writes c itself; assistant_asked: it leaves c empty (filled from the log)
        asked = "Could you tell me more about what you need?" if ok and "Not refinements" in text else ""
        return json.dumps({"is_clarification": ok, "query": "", "clarifying_question": asked,
                           "refined_query": reply if ok else "", "facet": "the missing detail" if ok else ""})
    if "context_independent" in props:  # Q^L filter
        q = text.split('"')[1]
        return json.dumps({"context_independent": q != "what about it", "well_formed": True, "reason": "r"})
    if "topic" in props:  # Q^G generation: the nurse's first question repeats a logged one; students repeat
        persona = text.split("Here is a person:\n")[1].split("\n")[0]
        if "night-shift nurse" in persona and job.sampling["seed"] == 0:
            return json.dumps({"topic": "laptops", "question": "Can you recommend a good laptop?"})
        if "computer science student" in persona:
            return json.dumps({"topic": "python", "question": "How do I learn Python fast?"})
        return json.dumps({"topic": "life", "question": f"What should a {persona[:30]} plan for {job.sampling['seed']}?"})
    if "question" in props:  # Q^G transformation
        original = text.split('Original message: "')[1].split('"')[0]
        return json.dumps({"question": original + (" I live in Lyon." if "Add one" in text else "")})
    if "choice" in props:  # CoTAP: ask (first candidate) for generated questions, answer logged ones
        n = job.json_schema["properties"]["choice"]["maximum"]
        request = text.split('User request: "')[1].split('"')[0]
        choice = 1 if n >= 1 and ("book" in request or "nurse" in request) else 0
        return json.dumps({"reasoning": "Thinking it through.", "choice": choice, "rationale": "because"})
    if "answer" in props:  # direct answer for generated questions
        return json.dumps({"answer": "Here is a direct answer."})
    if "facets" in props:  # FM-LLM: one facet shared with FM-LOG, one of its own
        return json.dumps({"facets": [{"facet": "the location", "clarifying_question": "Where are you located?"},
                                      {"facet": "the deadline", "clarifying_question": "By when do you need it?"}]})
    if "facet" in props:  # FM-LOG: samples 0 and 1 agree (exact duplicate), sample 2 differs
        if idx < 2:
            return json.dumps({"facet": "the location", "clarifying_question": "Where are you located?"})
        return json.dumps({"facet": "the budget", "clarifying_question": "How much can you spend?"})
    return "{}"


def _params(tmp_path: Path, **sections) -> str:
    data = {"llm": {"cache_path": str(tmp_path / "cache.sqlite")}, "quality": {"max_error_rate": 0.2},
            "logs": {"default_log_date": "2024-05-01"}}
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


class _Runs:
    """The runs of one pipeline call (one per log day, then one for the unpartitioned groups) seen as one."""

    def __init__(self, results: list) -> None:
        self.results = results
        self.success = all(r.success for r in results)

    def get_asset_check_evaluations(self) -> list:
        return [c for r in self.results for c in r.get_asset_check_evaluations()]

    def metadata(self, key: str) -> dict:
        """The last materialization's metadata values of asset `group/name`."""
        events = [m for r in self.results for m in r.asset_materializations_for_node(key.replace("/", "__"))]
        return {k: v.value for k, v in events[-1].metadata.items()}


def _group(module) -> str:
    """defs/<group>/assets.py -> <group>."""
    return module.__name__.split(".")[-2]


def _run(tmp_path, monkeypatch, modules, responder=clarilm_responder, fail=None, per_day=False, **sections):
    """Materialize the `logs` group over the days that have records (registered as log-day partitions) in one
    run over the range, or one run per day with per_day; then the rest."""
    monkeypatch.chdir(tmp_path)
    if not (tmp_path / "data").exists():
        shutil.copytree(REPO / "data", tmp_path / "data", ignore=shutil.ignore_patterns("*.py"))
    SCRIPTED["backend"] = ScriptedBackend(responder, fail)
    params = load_params(_params(tmp_path, **sections))
    groups = {_group(m) for m in modules}
    resources = {"io_manager": WarehouseIOManager(), "params": params,
                 "llm": scripted_llm(params, SCRIPTED["backend"]), "embedder": WordEmbedder()}
    log_defs = logs.build(params)

    def checks_of(assets, group_names):
        keys = {k for a in assets for k in a.keys if k.path[0] in group_names}
        return build_checks(keys)

    instance = dg.DagsterInstance.ephemeral()
    days, _ = days_to_ingest(params.logs)
    register_days(instance, days)
    log_assets = list(log_defs.assets)
    runs = [{"partition_key": d} for d in days] if per_day else [{"tags": range_tags(days[0], days[-1])}]
    results = [dg.materialize([*log_assets, *checks_of(log_assets, {logs.GROUP})], resources=resources,
                              instance=instance, raise_on_error=False, **run) for run in runs]
    rest = [m for m in modules if m is not logs]
    if rest:
        every = [*log_assets, *dg.load_assets_from_modules(rest)]
        results.append(dg.materialize(
            [*every, *checks_of(every, groups - {logs.GROUP})],
            selection=dg.AssetSelection.groups(*(_group(m) for m in rest)), resources=resources,
            instance=instance, raise_on_error=False))
    return _Runs(results)


def _read(tmp_path, group, name) -> pl.DataFrame:
    return read_asset(tmp_path / "assets", group, name)


def _checks_pass(result):
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]
    return {c.check_name for c in checks}


def test_logs_group_on_the_shipped_sample(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs])
    assert result.success
    assert {"gx_raw_logs", "gx_raw_logs_rejected", "gx_raw_logs_ledger", "gx_log_candidates",
            "gx_log_clarifications"} <= _checks_pass(result)
    assert len(result.results) == 1  # one run over the days with records, 2024-05-01..03, one file per day
    assert sorted(p.stem for p in (tmp_path / "assets/logs/raw_logs").glob("*.parquet")) == [
        "2024-05-01", "2024-05-02", "2024-05-03"]
    raw = _read(tmp_path, "logs", "raw_logs")
    rej = _read(tmp_path, "logs", "raw_logs_rejected")
    assert raw["conversation_id"].n_unique() == 43 and rej.height == 7
    assert rej.columns == ["file", "record", "field", "reason", "raw"]
    assert sorted(r.split(":")[0] for r in rej["reason"]) == sorted(["invalid_json", "missing_role", "empty_text", "wrong_type", "not_utf8",
                                            "oversized_message", "duplicate_conversation_id"])
    cand = _read(tmp_path, "logs", "log_candidates")
    asked = cand.filter(pl.col("source") == "assistant_asked")
    assert asked.height == raw.filter(pl.col("role") == "assistant").height
    users = raw.filter(pl.col("role") == "user")
    assert cand.height - asked.height == users.height - users["conversation_id"].n_unique()  # consecutive pairs
    # 17 short assistant questions + the 2 long ones of sharegpt_refinements.json (no length limit by default)
    assert int(asked["kept"].sum()) == 19 and int(cand["kept"].sum()) == 19 + 25
    assert set(asked.filter(pl.col("reject_reason") == "too_long")["candidate_id"]) == set()
    clar = _read(tmp_path, "logs", "log_clarifications")
    assert clar.height == 44 and set(clar["status"]) == {"ok"}
    # the scripted extractor rejects "Yes, show me the formula." and "No thanks. Who wrote Macbeth?"
    assert set(clar.filter(~pl.col("kept"))["candidate_id"]) >= {"wc-04:1", "wc-05:1"}
    kept = clar.filter("kept")
    assert dict(kept.group_by("source").len().iter_rows()) == {"assistant_asked": 13, "user_refinement": 18}
    assert kept["facet"].null_count() == 0 and kept.filter(pl.col("source") == "assistant_asked")["c_in_log"].all()
    assert (kept.filter(pl.col("source") == "user_refinement")["filled_from_log"].list.len() == 1).all()  # c is written
    assert len(SCRIPTED["backend"].jobs) == 44  # one extraction call per candidate


def test_logs_length_limit_drops_long_clarifications(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs], logs={"prefilter_max_chars": 300, "sources": ["assistant_asked"]})
    assert result.success
    _checks_pass(result)
    cand = _read(tmp_path, "logs", "log_candidates")
    assert set(cand["source"]) == {"assistant_asked"} and int(cand["kept"].sum()) == 17
    dropped = cand.filter((pl.col("reject_reason") == "too_long") & pl.col("asks_user"))
    assert sorted(dropped["candidate_id"]) == ["sr-04:1", "sr-05:1"]
    assert _read(tmp_path, "logs", "log_clarifications").height == 17


def test_ledger_check_fails_when_a_quarantined_record_goes_missing(tmp_path, monkeypatch):
    assert _run(tmp_path, monkeypatch, [logs]).success
    suite = load_suite(REPO / "expectations/logs.raw_logs_ledger.yaml")
    ledger = _read(tmp_path, "logs", "raw_logs_ledger")
    params = load_params(tmp_path / "params.yaml")
    assert validate_frame(ledger, suite, params)[0]
    day = next(p for p in (tmp_path / "assets/logs/raw_logs_rejected").glob("*.parquet") if pl.read_parquet(p).height)
    pl.read_parquet(day).slice(1).write_parquet(day)  # one rejected record silently lost
    ok, results = validate_frame(ledger, suite, params)
    assert not ok and [k for k, v in results.items() if not v["success"]] == [
        "02 read = kept + rejected, per file and day, from the stored partitions"]


def test_only_days_with_records_in_the_window_are_ingested(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "data", tmp_path / "data", ignore=shutil.ignore_patterns("*.py"))
    cfg = load_params(_params(tmp_path)).logs
    assert days_to_ingest(cfg)[0] == ["2024-05-01", "2024-05-02", "2024-05-03"]
    days, counts = days_to_ingest(cfg.model_copy(update={"date_from": "2024-05-02"}))
    assert days == ["2024-05-02", "2024-05-03"] and sum(counts.values()) == 50


def _tables(root: Path) -> dict[str, dict[str, pl.DataFrame]]:
    """{asset: {stored file name: rows}} of the logs group."""
    return {name: {f.name: pl.read_parquet(f) for f in sorted((root / "assets/logs" / name).glob("*.parquet"))}
            for name in ("raw_logs", "raw_logs_rejected", "raw_logs_ledger", "log_candidates", "log_clarifications")}


def test_one_run_over_the_days_stores_the_same_rows_as_one_run_per_day(tmp_path, monkeypatch):
    one, per_day = tmp_path / "one", tmp_path / "per_day"
    for folder, flag in ((one, False), (per_day, True)):
        folder.mkdir()
        result = _run(folder, monkeypatch, [logs], per_day=flag)
        assert result.success and len(result.results) == (3 if flag else 1)
    a, b = _tables(one), _tables(per_day)
    for name in a:
        assert list(a[name]) == list(b[name]) == ["2024-05-01.parquet", "2024-05-02.parquet", "2024-05-03.parquet"]
        assert sum(df.height for df in a[name].values()), name
        for day in a[name]:  # paths in rows are relative to each run's folder, so they compare equal
            assert a[name][day].equals(b[name][day]), (name, day)


def test_logs_max_extractions_keeps_skipped_rows(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs], logs={"max_extractions": 5})
    assert result.success
    _checks_pass(result)
    clar = _read(tmp_path, "logs", "log_clarifications")
    per_day = _read(tmp_path, "logs", "log_candidates").filter("kept").group_by("log_date").len()["len"].to_list()
    assert sum(per_day) == 44 and len(per_day) > 1  # the cap applies per day (partition)
    assert clar.height == 44 and (clar["status"] == "skipped").sum() == sum(max(n - 5, 0) for n in per_day)
    assert len(SCRIPTED["backend"].jobs) == sum(min(n, 5) for n in per_day)


def test_logs_llm_errors_become_rows_and_fail_the_error_rate_check(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs], fail=lambda job: "RuntimeError: down")
    clar = _read(tmp_path, "logs", "log_clarifications")
    assert clar.height == 44 and set(clar["status"]) == {"llm_error"} and not clar["kept"].any()
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["gx_log_clarifications"] is False and checks["gx_raw_logs"] is True


def test_questions_group(tmp_path, monkeypatch):
    # dedup_exact_max 0: Q^L and Q^G dedup take the ANN path (faiss), which must give the exact path's rows below
    result = _run(tmp_path, monkeypatch, [logs, questions],
                  questions={"n_personas": 3, "questions_per_persona": 2, "dedup_exact_max": 0})
    assert result.success
    assert result.metadata("questions/seed_questions_ql")["dedup_method"] == "ann"
    assert result.metadata("questions/seed_questions_qg")["dedup_method"] == "ann"
    assert {"gx_seed_questions_ql", "gx_personas", "gx_seed_questions_qg"} <= _checks_pass(result)
    ql = _read(tmp_path, "questions", "seed_questions_ql")
    assert ql.height == 43  # one row per kept conversation
    reasons = dict(ql.group_by("reject_reason").len().iter_rows())
    assert reasons == {None: 37, "not_english": 2, "context_dependent": 1, "duplicate": 3}
    # the Parquet file repeats three ShareGPT first questions word for word: exact duplicates
    dup = ql.filter(pl.col("question_id") == "ql-sg-00").row(0, named=True)
    assert (dup["duplicate_of"], dup["dedup_reason"], dup["kept"]) == ("ql-pq-00", "exact", False)
    kept = ql.filter("kept")
    # where the assistant's first reply asks the user something (12 clarifying conversations kept after dedup,
    # 4 answers ending in an offer such as "Do you want a longer version?") the log has no direct answer
    assert kept["log_assistant_asked"].sum() == 16 and kept["log_answer"].null_count() == 16
    assert kept.filter(~pl.col("log_assistant_asked"))["log_answer"].null_count() == 0
    p = _read(tmp_path, "questions", "personas")
    assert p.height == 12 and p.filter("selected")["persona_id"].to_list() == ["nurse", "student", "retiree"]
    qg = _read(tmp_path, "questions", "seed_questions_qg").sort("question_id")
    assert qg.height == 6
    # 6 rows at 80/10/10 by largest remainder: 5 keep, 1 enrich, 0 simplify
    assert dict(qg.group_by("transformation").len().iter_rows()) == {"keep": 5, "enrich": 1}
    assert qg.select("question_id", "kept", "reject_reason", "duplicate_of").rows() == [
        ("qg-nurse-00", False, "duplicate_of_ql", "ql-pq-00"), ("qg-nurse-01", True, None, None),
        ("qg-retiree-00", True, None, None), ("qg-retiree-01", True, None, None),
        ("qg-student-00", True, None, None), ("qg-student-01", False, "duplicate", "qg-student-00")]
    enriched = qg.filter(pl.col("transformation") == "enrich").row(0, named=True)
    assert enriched["question"].endswith("I live in Lyon.") and enriched["transform_status"] == "ok"
    assert enriched["original_question"] + " I live in Lyon." == enriched["question"]
    # demonstrations come from kept Q^L questions
    kept_ql = set(ql.filter("kept")["question"])
    assert all(set(d) <= kept_ql for d in qg["demos"]) and all(len(d) == 3 for d in qg["demos"])
    q = _read(tmp_path, "questions", "question_set")
    assert q.height == 37 + 4 and q["question_source"].to_list()[:4] == ["log", "generated", "log", "generated"]
    assert q["selected"].all()  # questions.max_selected unset


def test_facets_group(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs, questions, facets], questions={"max_selected": 4},
                  facets={"log_samples": 3})
    assert result.success
    assert {"gx_facet_candidates_log", "gx_facet_candidates_llm", "gx_facet_candidates"} <= _checks_pass(result)
    q = _read(tmp_path, "questions", "question_set")
    selected = q.filter("selected")["question_id"].to_list()
    assert len(selected) == 4
    log = _read(tmp_path, "facets", "facet_candidates_log")
    assert log.height == 4 * 3 and set(log["question_id"]) == set(selected)
    assert dict(log.group_by("reject_reason").len().iter_rows()) == {None: 8, "exact_duplicate": 4}
    # demos for FM-LOG come from the log-mined tuples
    fm_log_prompt = next(j for j in SCRIPTED["backend"].jobs
                         if j.json_schema and set(j.json_schema["properties"]) == {"facet", "clarifying_question"})
    assert "In real conversations, users clarified requests like these:" in fm_log_prompt.messages[-1]["content"]
    assert "(no logged examples)" not in fm_log_prompt.messages[-1]["content"]
    llm = _read(tmp_path, "facets", "facet_candidates_llm")
    assert llm.height == 4 * 2 and llm["kept"].all()
    fused = _read(tmp_path, "facets", "facet_candidates")
    assert fused.height == 8 + 8
    kept = fused.filter("kept")
    # per question: "the location" (log, absorbs the llm copy), "the budget" (log), "the deadline" (llm)
    assert kept.height == 4 * 3
    assert sorted(kept.filter(pl.col("question_id") == selected[0])["facet"]) == ["the budget", "the deadline",
                                                                                  "the location"]
    loc = kept.filter(pl.col("facet") == "the location")
    assert (loc["origin"] == "log").all() and loc["merged_origins"].to_list() == [["llm", "log"]] * 4
    meta = result.metadata("facets/facet_candidates")
    # per question 3 distinct texts after the exact merge of the two "the location" facets: 3 pairs, none similar
    assert (meta["dedup_method"], meta["dedup_candidates"], meta["dedup_verified_pairs"]) == ("exact", 4 * 3, 0)


def test_annotations_group_and_trl_exports(tmp_path, monkeypatch):
    from datasets import load_dataset

    in3 = {"format": "in3", "path": "data/external/in3_sample.jsonl"}
    result = _run(tmp_path, monkeypatch, [logs, questions, facets, annotations], questions={"max_selected": 4},
                  facets={"log_samples": 2}, evaluation={"datasets": ["clarifymt", "in3"], "external": {"in3": in3}},
                  annotations={"max_question_pairs": 1, "sft_external": {
                      "in3_train": {"format": "in3", "path": "data/external/in3_train_sample.jsonl"}}})
    assert result.success
    assert {"gx_cotap_annotations", "gx_preference_pairs", "gx_sft_dataset", "gx_dpo_dataset",
            "gx_held_out_set"} <= _checks_pass(result)
    cotap = _read(tmp_path, "annotations", "cotap_annotations").sort("question_id")
    assert cotap.height == 4 and set(cotap["status"]) == {"ok"}
    # Q is interleaved log / generated; the scripted reasoner asks about the book and the nurse's question
    assert dict(cotap.group_by("question_source", "decision").len().select(
        pl.concat_str("question_source", "decision", separator="/"), "len").iter_rows()) == {
        "log/answer": 1, "log/ask": 1, "generated/answer": 1, "generated/ask": 1}
    # both logged questions come from conversations where the assistant clarified: answers are generated
    assert cotap.filter(pl.col("question_source") == "log")["answer_source"].to_list() == ["generated"] * 2
    assert set(cotap["answer"]) == {"Here is a direct answer."}
    # candidates per question: "the location" (log, absorbed the llm copy), "the deadline" (llm)
    assert cotap["candidates"].list.len().to_list() == [2, 2, 2, 2]
    pairs = _read(tmp_path, "annotations", "preference_pairs")
    assert dict(pairs.group_by("type").len().iter_rows()) == {
        "clarify_over_answer": 2, "better_question": 2, "answer_over_clarify": 2}
    sft = _read(tmp_path, "annotations", "sft_dataset")
    dpo = _read(tmp_path, "annotations", "dpo_dataset")
    assert sft.height == 4 and dpo.height == 6
    hf = str(tmp_path / "hf")
    s = load_dataset("json", data_files=str(tmp_path / "assets/annotations/sft_dataset.jsonl"), split="train",
                     cache_dir=hf)
    d = load_dataset("json", data_files=str(tmp_path / "assets/annotations/dpo_dataset.jsonl"), split="train",
                     cache_dir=hf)
    assert s.column_names == ["messages"] and s.num_rows == 4
    assert d.column_names == ["prompt", "chosen", "rejected"] and d.num_rows == 6
    assert [m["role"] for m in s[0]["messages"]] == ["system", "user", "assistant"]
    assert d[0]["prompt"][-1]["role"] == "user" and d[0]["chosen"][0]["content"].startswith("Need clarification:")
    assert _read(tmp_path, "annotations", "held_out_set").height == 0  # test_fraction 0.1 of 4 rounds to none
    # SFT-IN3's export from the shipped IN3 training sample: 9 records, one quarantined, one task that is an
    # evaluated IN3 item (evaluation.external.in3) not kept; the two non-vague tasks answered by the answerer
    ext = _read(tmp_path, "annotations", "sft_external_dataset")
    assert "gx_sft_external_dataset" in _checks_pass(result)
    assert (ext.height, ext.filter("kept").height) == (8, 7)
    assert ext.filter(~pl.col("kept"))["reason"].to_list() == ["in_evaluation_set"]
    assert dict(ext.filter("kept").group_by("target_origin").len().iter_rows()) == {"dataset": 5, "answerer": 2}
    assert _read(tmp_path, "annotations", "sft_external_dataset_rejected")["field"].to_list() == ["vague"]
    e = load_dataset("json", data_files=str(tmp_path / "assets/annotations/sft_external_dataset.jsonl"),
                     split="train", cache_dir=hf)
    assert e.column_names == ["messages"] and e.num_rows == 7


def test_held_out_split_reaches_no_training_export(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, [logs, questions, facets, annotations],
                  questions={"max_selected": 4, "test_fraction": 0.25}, facets={"log_samples": 2},
                  annotations={"max_question_pairs": 1})
    assert result.success
    assert {"gx_question_set", "gx_sft_dataset", "gx_dpo_dataset", "gx_held_out_set"} <= _checks_pass(result)
    q = _read(tmp_path, "questions", "question_set").filter("selected")
    test_ids = q.filter(pl.col("split") == "test")["question_id"].to_list()
    assert len(test_ids) == 1 and q.filter(pl.col("split") == "train").height == 3
    held = _read(tmp_path, "annotations", "held_out_set")
    assert held["question_id"].to_list() == test_ids and held["reference_action"].to_list() == ["answer"]
    assert _read(tmp_path, "annotations", "cotap_annotations").height == 4  # the test question is annotated
    for name in ("sft_dataset", "dpo_dataset"):
        assert not set(_read(tmp_path, "annotations", name)["question_id"]) & set(test_ids)
        exported = (tmp_path / f"assets/annotations/{name}.jsonl").read_text()
        assert held["question"][0] not in exported


def test_chain_runs_when_the_logs_hold_no_clarification(tmp_path, monkeypatch):
    """One plain Q&A conversation: no candidates, no tuples, yet Q, facets and pairs still build (Q^G, FM-LLM)."""
    (tmp_path / "data" / "logs").mkdir(parents=True)
    shutil.copy(REPO / "data" / "personas.jsonl", tmp_path / "data" / "personas.jsonl")
    (tmp_path / "data" / "logs" / "one.jsonl").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "what about it"}, {"role": "assistant", "content": "About what?"}]})
        + "\n")
    result = _run(tmp_path, monkeypatch, [logs, questions, facets, annotations],
                  logs={"paths": ["data/logs/*.jsonl"]}, questions={"n_personas": 1, "questions_per_persona": 1})
    assert result.success
    _checks_pass(result)
    assert _read(tmp_path, "logs", "log_candidates")["kept"].sum() == 0
    assert _read(tmp_path, "logs", "log_clarifications").height == 0
    ql = _read(tmp_path, "questions", "seed_questions_ql")
    assert ql.select("kept", "reject_reason").rows() == [(False, "context_dependent")]
    q = _read(tmp_path, "questions", "question_set")
    assert q["question_source"].to_list() == ["generated"]
    cotap = _read(tmp_path, "annotations", "cotap_annotations")
    # the only question is the nurse's generated "Can you recommend a good laptop?"; the scripted CoTAP judge
    # asks only about requests mentioning a book or a nurse, so it answers here
    assert cotap.height == 1 and cotap["decision"].to_list() == ["answer"] and cotap["status"].to_list() == ["ok"]
    assert _read(tmp_path, "annotations", "dpo_dataset").height >= 1
