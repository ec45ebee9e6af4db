"""The double_turn group end to end with a scripted LLM whose every answer is known, so every number is hand-checked.

The scripted world (3 training queries):
  q1 "Who directed Titanic?"          ambiguous: James Cameron (1997 film) / Jean Negulesco (1953 film)
  q2 "Who wrote Frankenstein?"        one answer: Mary Shelley
  q3 "what is the capital of canada"  one answer: Ottawa (from the NQ-Open file)
plus one broken AmbigQA record and one broken NQ-Open line (quarantined). The evaluation files hold e1-e3,
the same questions followed by a suffix (other queries, answered the same way by the scripted world).
"""

import json

import dagster as dg
import datasets
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend, scripted_llm

from dagster_project.config import load_params
from dagster_project.defs.double_turn import assets as double_turn
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager

Q1, Q2, Q3 = "Who directed Titanic?", "Who wrote Frankenstein?", "what is the capital of canada"
GOOD_CQ = "Which film, the 1997 one or the 1953 one?"
EVAL_SUFFIX = " Asked in the evaluation set."


def _target(content: str) -> str:
    """Which of the three questions a prompt is about (few-shot prompts: the last 'Question:')."""
    if "Now answer this question" in content or _completion(content):
        content = content.rsplit("Question:", 1)[1]
    for q in (Q1, Q2, Q3):
        if q in content:
            return q
    raise AssertionError(f"unknown prompt: {content[:200]}")


def _completion(content: str) -> bool:
    return content.rstrip().endswith("Answer:")


def world(job, idx: int) -> str:
    content = job.messages[-1]["content"]
    props = (job.json_schema or {}).get("properties", {})
    q = _target(content)
    sampled = job.sampling["temperature"] > 0
    if _completion(content):  # Y_model: few-shot base completion, the same answers in plain text
        if q == Q1:
            return ("Jean Negulesco" if idx % 2 == 0 else "James Cameron") if sampled else "James Cameron"
        return {Q2: "Mary Shelley", Q3: "Ottawa"}[q] + "\nQuestion: another?"
    if "Now answer this question" in content:  # few-shot answerer: gold, but q1's samples alternate
        if q == Q1:
            return json.dumps({"answer": ("Jean Negulesco" if idx % 2 == 0 else "James Cameron") if sampled
                               else "James Cameron"})
        return json.dumps({"answer": {Q2: "Mary Shelley", Q3: "Ottawa"}[q]})
    if "They replied:" in content:  # answer after clarification
        reply = content.split("They replied:", 1)[1]
        ans = "James Cameron" if "1997" in reply else "Jean Negulesco" if "1953" in reply else "Mary Shelley" \
            if "novel" in reply else "no idea"
        return json.dumps({"answer": ans})
    if "reply_1" in props:  # SFT generator
        return json.dumps({"decline": False, "clarifying_question": "Which Titanic film?", "reply_1": "The 1997 one",
                           "reply_2": "The one by Jean Negulesco"})
    if "clarifying_question" in props:  # clarifier: q1 greedy good, sampled useless; q2/q3 duplicates
        cq = {Q1: "Do you mean the movie?" if sampled else GOOD_CQ, Q2: "Do you mean the novel?",
              Q3: "Which Canada do you mean?"}[q]
        return json.dumps({"clarifying_question": cq})
    if "abstain" in props:  # user simulator
        expected = content.split("The answer you are looking for is:", 1)[1].split("\n", 1)[0]
        if "Do you mean the movie?" in content:
            return json.dumps({"reply": "Yes, the movie by James Cameron", "abstain": False} if "Cameron" in expected
                              else {"reply": "", "abstain": True})
        if "Canada" in content:
            return json.dumps({"reply": "I want Ottawa", "abstain": False})  # leaks the answer
        reply = {"James Cameron": "The 1997 film.", "Jean Negulesco": "The 1953 film.",
                 "Mary Shelley": "The novel."}[expected.strip().strip('"')]
        return json.dumps({"reply": reply, "abstain": False})
    if "score" in props:  # single-turn judge prefers answers to questions
        return json.dumps({"score": 3 if '"Clarifying Question:' in content else 8, "reason": "r"})
    # subjects (free text)
    if "Do not answer yet" in content:
        return "Clarifying Question: " + {Q1: GOOD_CQ, Q2: "Do you mean the novel?", Q3: "Which Canada do you mean?"}[q]
    if "If the question is clear" in content:
        return "Clarifying Question: " + GOOD_CQ if q == Q1 else {Q2: "Mary Shelley", Q3: "Ottawa."}[q]
    if sampled:
        return {Q1: ["James Cameron", "Jean Negulesco", "James Cameron"][idx % 3], Q2: "Mary Shelley", Q3: "Ottawa"}[q]
    return {Q1: "The answer is James Cameron.", Q2: "Mary Shelley", Q3: "Ottawa"}[q]


def _write_inputs(tmp_path):
    ambig = [
        {"id": "q1", "question": Q1, "annotations": [
            {"type": "multipleQAs", "qaPairs": [{"question": "Who directed the 1997 Titanic?", "answer": ["James Cameron"]},
                                                {"question": "Who directed the 1953 Titanic?", "answer": ["Jean Negulesco"]}]},
            {"type": "singleAnswer", "answer": ["james cameron"]}]},
        {"id": "q2", "question": Q2, "annotations": [{"type": "singleAnswer", "answer": ["Mary Shelley"]}]},
        {"id": "bad", "question": "Broken?", "annotations": [{"type": "singleAnswer", "answer": "not a list"}]},
    ]
    (tmp_path / "ambig.json").write_text(json.dumps(ambig))
    (tmp_path / "nq.jsonl").write_text(json.dumps({"id": "q3", "question": Q3, "answer": ["Ottawa"]}) + "\n{oops\n")
    held_out = [{**r, "id": "e" + r["id"][1:], "question": r["question"] + EVAL_SUFFIX} for r in ambig[:2]]
    (tmp_path / "ambig_eval.json").write_text(json.dumps(held_out))
    (tmp_path / "nq_eval.jsonl").write_text(json.dumps({"id": "e3", "question": Q3 + EVAL_SUFFIX,
                                                        "answer": ["Ottawa"]}) + "\n")


def _params(tmp_path, **overrides) -> str:
    data = {
        "llm": {"cache_path": str(tmp_path / "cache.sqlite")},
        "quality": {"max_error_rate": 0.2},
        "double_turn": {
            "inputs": [{"path": "ambig.json", "format": "ambigqa", "split": "train"},
                       {"path": "nq.jsonl", "format": "nq_open", "split": "train"},
                       {"path": "ambig_eval.json", "format": "ambigqa", "split": "eval"},
                       {"path": "nq_eval.jsonl", "format": "nq_open", "split": "eval"}],
            "max_queries": None, "rounds": 1, "n_shots": 2, "n_clarify_sampled": 1, "n_direct_samples": 3,
            "random_repeats": 50, "sft_fraction": None, **overrides,
        },
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _run(tmp_path, monkeypatch, responder=world, fail=None, **overrides):
    monkeypatch.chdir(tmp_path)
    _write_inputs(tmp_path)
    params = load_params(_params(tmp_path, **overrides))
    assets = dg.load_assets_from_modules([double_turn])
    checks = build_checks({k for a in assets for k in a.keys})
    return dg.materialize(
        [*assets, *checks],
        resources={"io_manager": WarehouseIOManager(), "params": params,
                   "llm": scripted_llm(params, ScriptedBackend(responder, fail))},
        raise_on_error=False,
    )


def _read(tmp_path, name: str) -> pl.DataFrame:
    return pl.read_parquet(tmp_path / f"assets/double_turn/{name}.parquet")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dt")
    mp = pytest.MonkeyPatch()
    try:
        result = _run(tmp_path, mp)
    finally:
        mp.undo()
    return tmp_path, result


def test_group_materializes_and_checks_pass(built):
    tmp_path, result = built
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 13  # 12 GX suites + the blocking train/eval overlap check
    assert {c.check_name: c.passed for c in checks}["no_train_eval_overlap"] is True
    meta = {m.event_specific_data.materialization.asset_key.path[-1]: m.event_specific_data.materialization.metadata
            for m in result.get_asset_materialization_events()}
    # both simulator roles fall back to `default` here: the report says so
    assert meta["answer_set_eval"]["simulators_same_model"].value is True
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]


def test_import_and_quarantine(built):
    tmp_path, _ = built
    qa = _read(tmp_path, "qa_sets").sort("query_id")
    assert qa["query_id"].to_list() == ["e1", "e2", "e3", "q1", "q2", "q3"]
    assert qa["n_interpretations"].to_list() == [2, 1, 1] * 2  # q1's singleAnswer merges into the Cameron reading
    assert qa["is_ambiguous"].to_list() == [True, False, False] * 2
    assert qa["use"].to_list() == ["eval"] * 3 + ["train"] * 3
    assert qa["selected_eval"].to_list() == [True] * 3 + [False] * 3
    assert qa["selected_train"].to_list() == [False] * 3 + [True] * 3
    rej = _read(tmp_path, "qa_sets_rejected").sort("file")
    assert rej.columns == ["file", "record", "field", "reason", "raw"]  # the io.records Quarantine
    # the third AmbigQA record (1-based, as every io.records record) and the second NQ-Open line
    assert rej.select("file", "record", "field").rows() == [("ambig.json", 3, "annotations[0].answer"),
                                                            ("nq.jsonl", 2, "<record>")]
    assert '"bad"' in rej["raw"][0] and rej["raw"][1] == "{oops"


def test_feasible_answers_and_sft(built):
    tmp_path, _ = built
    fa = _read(tmp_path, "feasible_answers").sort("query_id")
    assert fa["y_model"].to_list() == [["James Cameron", "Jean Negulesco"], ["Mary Shelley"], ["Ottawa"]]
    assert fa["model_filter_passed"].all()
    assert fa["sft_human"].to_list() == [True, False, False] and fa["sft_model"].to_list() == [True, False, False]
    sft = _read(tmp_path, "clarify_sft")
    assert sft.height == 2 * (1 + 2)  # (human, model) x (one (x, q) row + two (x, q, a, y) rows)
    reasons = sft.group_by("row_type", "reason").len().sort("row_type", "reason").rows()
    assert reasons == [("answer", None, 2), ("answer", "reply leaks the answer", 2), ("clarify", None, 2)]
    ex = tmp_path / "assets/double_turn/exports"
    clar = datasets.load_dataset("json", data_files=str(ex / "clarify_sft.jsonl"), split="train")
    assert clar.num_rows == 2
    # the Clarify subject's evaluation prompt (system message included) and, with subject_output free_text,
    # the paper's protocol as the target
    assert [m["role"] for m in clar[0]["messages"]] == ["system", "user", "assistant"]
    assert clar[0]["messages"][1]["content"].startswith(Q1 + "\nDo not answer yet")
    assert clar[0]["messages"][2]["content"] == "Clarifying Question: Which Titanic film?"
    after = datasets.load_dataset("json", data_files=str(ex / "answer_after_clarify_sft.jsonl"), split="train")
    assert "They replied: \"The 1997 one\"" in after[0]["messages"][1]["content"]
    assert after[0]["messages"][2]["content"] == '{"answer": "James Cameron"}'
    sft_all = datasets.load_dataset("json", data_files=str(ex / "sft_dataset.jsonl"), split="train")
    assert sft_all.num_rows == 2 + 1  # clarify examples + distinct kept (x, y_i) direct examples


def test_candidates_simulations_outcomes(built):
    tmp_path, _ = built
    c = _read(tmp_path, "candidate_responses")
    assert c.filter(pl.col("in_pairs")).group_by("query_id").len().sort("query_id").rows() == \
        [("q1", 3), ("q2", 2), ("q3", 2)]
    assert c.filter(pl.col("candidate_id") == "q2:c1")["reason"].item() == "duplicate of q2:c0"
    s = c.filter((pl.col("query_id") == "q1") & (pl.col("kind") == "direct_sample")).sort("sample_index")
    assert s["answer"].to_list() == ["Jean Negulesco", "James Cameron", "Jean Negulesco"]
    assert s["in_topk"].to_list() == [True, True, False]
    sims = _read(tmp_path, "user_simulations")
    reasons = dict(sims.select("sim_id", "abstain_reason").iter_rows())
    assert reasons == {"q1:c0:u0": None, "q1:c0:u1": None, "q1:c1:u0": "leak", "q1:c1:u1": "simulator_abstained",
                       "q2:c0:u0": None, "q3:c0:u0": "leak"}
    out = _read(tmp_path, "double_turn_outcomes")
    scores = dict(out.group_by("candidate_id").agg(pl.col("candidate_score").first()).iter_rows())
    assert scores == {"q1:c0": 1.0, "q1:c1": 0.0, "q1:d": 0.5, "q2:c0": 1.0, "q2:d": 1.0, "q3:c0": 0.0, "q3:d": 1.0}


def test_preference_pairs_and_dpo_export(built):
    tmp_path, _ = built
    p = _read(tmp_path, "preference_pairs")
    dt_pairs = {(r["candidate_a"], r["candidate_b"]): (r["chosen_id"], r["reason"])
                for r in p.filter(pl.col("labeling") == "double_turn").iter_rows(named=True)}
    assert dt_pairs == {
        ("q1:c0", "q1:c1"): ("q1:c0", "higher score"), ("q1:c0", "q1:d"): ("q1:c0", "higher score"),
        ("q1:c1", "q1:d"): ("q1:d", "higher score"), ("q2:c0", "q2:d"): ("q2:d", "tie: direct answer preferred"),
        ("q3:c0", "q3:d"): ("q3:d", "higher score")}
    st = p.filter(pl.col("labeling") == "single_turn")
    assert st.height == 5 and int(st["kept"].sum()) == 4  # the judge ties the two clarifying questions of q1
    assert set(st.filter(pl.col("kept"))["chosen_kind"]) == {"direct"}  # single-turn bias against asking
    ex = tmp_path / "assets/double_turn/exports"
    dpo = datasets.load_dataset("json", data_files=str(ex / "dpo_dataset.jsonl"), split="train")
    assert dpo.num_rows == 5 and set(dpo.column_names) == {"prompt", "chosen", "rejected"}
    first = dpo[0]
    assert first["prompt"][0]["role"] == "system" and first["prompt"][1]["content"].startswith(Q1 + "\nIf the question")
    assert first["chosen"] == [{"role": "assistant", "content": f"Clarifying Question: {GOOD_CQ}"}]
    only = datasets.load_dataset("json", data_files=str(ex / "dpo_dataset_clarify_only.jsonl"), split="train")
    assert only.num_rows == 1


def test_empty_exports_are_skipped_and_every_export_loads(built):
    tmp_path, result = built
    manifest = _read(tmp_path, "training_exports")
    skipped = manifest.filter(~pl.col("written"))
    # single-turn labels tie q1's two clarifying questions: no clarify-vs-clarify pair, so no file at all
    assert skipped.select("export", "rows", "reason").rows() == [("dpo_single_turn_clarify_only", 0,
                                                                  "empty: no kept rows")]
    ex = tmp_path / "assets/double_turn/exports"
    assert sorted(p.stem for p in ex.glob("*.jsonl")) == sorted(manifest.filter(pl.col("written"))["export"])
    for row in manifest.filter(pl.col("written")).iter_rows(named=True):
        path = str(tmp_path / row["path"])
        assert datasets.load_dataset("json", data_files=path, split="train").num_rows == row["rows"] > 0
    meta = next(m.event_specific_data.materialization.metadata for m in result.get_asset_materialization_events()
                if m.event_specific_data.materialization.asset_key.path[-1] == "training_exports")
    assert meta["skipped_empty"].value == ["dpo_single_turn_clarify_only"]


def test_overlap_check_blocks_an_injected_leak(tmp_path, monkeypatch):
    """An evaluation question smuggled into a training export fails the blocking check; nothing is written."""
    real = double_turn.exports.sft_exports

    def leaky(sft, output):
        out = real(sft, output)
        out["clarify_sft"].append({"messages": [{"role": "user", "content": Q2 + EVAL_SUFFIX}]})
        return out

    monkeypatch.setattr(double_turn.exports, "sft_exports", leaky)
    result = _run(tmp_path, monkeypatch)
    check = {c.check_name: c for c in result.get_asset_check_evaluations()}["no_train_eval_overlap"]
    assert check.passed is False and check.metadata["leaks"].value == 1
    assert not list((tmp_path / "assets/double_turn/exports").glob("*.jsonl"))
    assert set(_read(tmp_path, "training_exports")["reason"]) == {"blocked: 1 evaluation leak(s)"}


def test_answer_set_eval_table(built):
    tmp_path, _ = built
    ev = _read(tmp_path, "eval_interactions")
    f1 = {(r["system"], r["query_id"]): r["f1"] for r in ev.iter_rows(named=True)}
    raw = {(r["system"], r["query_id"]): r["raw_output"] for r in ev.iter_rows(named=True)}
    assert raw[("clarify", "e1")] == f"Clarifying Question: {GOOD_CQ}" and raw[("direct_greedy", "e2")] == "Mary Shelley"
    assert f1[("direct_greedy", "e1")] == pytest.approx(2 / 3)  # one of two answers: P=1, R=1/2
    assert f1[("direct_sampled", "e1")] == 1.0  # top-2 of the samples covers both readings
    # e3: "I want Ottawa" names the answer but the question does not (no leak by the paper's rule): the user is
    # answered after all, wrongly ("no idea")
    assert f1[("clarify", "e1")] == 1.0 and f1[("clarify", "e3")] == 0.0
    t = {r["system"]: r for r in _read(tmp_path, "answer_set_eval").iter_rows(named=True)}
    assert t["direct_greedy"]["f1_total"] == pytest.approx(8 / 9)
    assert t["direct_greedy"]["f1_ambiguous"] == pytest.approx(2 / 3)
    assert t["clarify"]["f1_unambiguous"] == pytest.approx(0.5) and t["clarify"]["avg_turns"] == 2.0
    cod = t["clarify_or_direct"]
    assert cod["f1_total"] == 1.0 and cod["avg_turns"] == pytest.approx(4 / 3)
    assert cod["da_rate"] == pytest.approx(2 / 3) and cod["da_accuracy"] == 1.0
    rnd = t["random_baseline"]  # 2 of 3 answered directly at random: F1 in {5/9, 8/9, 1}, mean 22/27
    assert 5 / 9 <= rnd["f1_total"] <= 1.0 and rnd["f1_total"] == pytest.approx(22 / 27, abs=0.08)
    assert rnd["da_accuracy"] == pytest.approx(5 / 9, abs=0.12)


def test_failures_become_rows(tmp_path, monkeypatch):
    """A failing judge leaves single-turn pairs unscored; a failing user simulator fails rows, not the run."""

    def fail(job):
        props = (job.json_schema or {}).get("properties", {})
        if "score" in props:
            return "ConnectionError: judge down"
        if "abstain" in props and "1953" in job.messages[-1]["content"] and "Negulesco" in job.messages[-1]["content"]:
            return "RuntimeError: simulator down"
        return None

    result = _run(tmp_path, monkeypatch, fail=fail)
    pairs = _read(tmp_path, "preference_pairs")
    assert set(pairs.filter(pl.col("labeling") == "single_turn")["reason"]) == {"unscored candidate"}
    sims = _read(tmp_path, "user_simulations")
    assert sims.filter(pl.col("status") == "llm_error")["sim_id"].to_list() == ["q1:c0:u1"]
    out = _read(tmp_path, "double_turn_outcomes")
    assert out.filter(pl.col("candidate_id") == "q1:c0")["scored"].to_list() == [False, False]
    # the unscored clarifying question is left out of q1's double-turn pairs instead of counted wrong
    q1 = pairs.filter((pl.col("labeling") == "double_turn") & (pl.col("query_id") == "q1"))
    assert dict(zip(q1["candidate_a"] + "|" + q1["candidate_b"], q1["reason"]))["q1:c0|q1:d"] == "unscored candidate"
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["gx_single_turn_scores"] is False  # every judge call failed: error rate 1.0 > 0.2
    assert checks["gx_preference_pairs"] is True


def test_bad_input_file_names_the_file(tmp_path, monkeypatch):
    result = _run(tmp_path, monkeypatch, inputs=[{"path": "missing.json", "format": "ambigqa"}])
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert failure.cause.cls_name == "InputFileError"
    assert "missing.json: file not found" in failure.cause.message
    assert "(params: double_turn.inputs[0].path)" in failure.cause.message  # and the params key that names it


def test_llm_samples_per_query_metadata(built):
    """Closing-note figure: per query, feasible_answers makes rounds x (greedy + sample) = 2 answerer samples;
    candidate_responses 1 + 1 clarifier and 1 + 3 answerer samples; the judge scores 3, 2 and 2 candidates."""
    _, result = built
    meta = {m.asset_key.path[-1]: m.metadata for m in result.get_asset_materialization_events()
            for m in [m.event_specific_data.materialization]}
    per_query = {k: v.value for k, v in ((a, md.get("llm/samples_per_query")) for a, md in meta.items()) if v}
    assert per_query["feasible_answers"] == 2.0
    assert per_query["candidate_responses"] == 6.0
    assert per_query["single_turn_scores"] == pytest.approx(7 / 3, abs=0.01)
    assert per_query["user_simulations"] == pytest.approx(6 / 3, abs=0.01)  # 6 (candidate, user) simulations


@pytest.mark.parametrize("asset", ["feasible_answers", "eval_interactions", "user_simulations"])
def test_provenance_check_fails_without_raw_output(built, asset):
    """The GX suites enforce provenance on LLM rows: blanking one row's raw_output fails the suite."""
    from dagster_project.defs.quality.checks import SUITES_DIR, load_suite, validate_frame

    tmp_path, _ = built
    suite = load_suite(SUITES_DIR / f"double_turn.{asset}.yaml")
    params = load_params(str(tmp_path / "params.yaml"))
    frame = _read(tmp_path, asset)
    assert validate_frame(frame, suite, params)[0]
    blanked = frame.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col("raw_output"))
                                 .alias("raw_output"))
    ok, results = validate_frame(blanked, suite, params)
    failed = [k for k, v in results.items() if not v["success"]]
    assert not ok and len(failed) == 1 and "provenance" in failed[0]
