"""The Fidelity page (docs/fidelity.md, once the README's section), claim by claim: one test per quantitative or
behavioural sentence a test can check, named after the claim (issue 27.8). A failing test here means a sentence of
that page became false."""

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dagster_project.config import EvaluationConfig, load_params
from dagster_project.core.clarifymt.agent.at_cot import ACTION_KEYS
from dagster_project.core.clarifymt.agent.clarify_agent import ClarifyAgent, rule_plan
from dagster_project.core.clarifymt.agent.registry import BUILDERS, build_method
from dagster_project.core.clarifymt.agent.tracker import Tracker
from dagster_project.core.clarifymt.judge import method_pairs, pairwise_outcome
from dagster_project.core.clarifymt.metrics import clarification_metrics, method_comparison
from dagster_project.core.double_turn.preferences import prefer
from dagster_project.core.intents.curation import keep_count
from dagster_project.core.intents.metrics import sdrs
from dagster_project.core.shared.taxonomy import PERSONA_BY_KEY, reference_actions
from tests.core.test_agent_methods import A1, Chat, agent_reply, turn
from tests.core.test_eval_format import _any_reply

REPO = Path(__file__).resolve().parents[1]
FIDELITY = (REPO / "docs" / "fidelity.md").read_text()
assert FIDELITY.startswith("# Fidelity: each paper, step by step")
DEMO = load_params(REPO / "params.yaml")
PAPER = load_params(REPO / "params.paper.yaml")


def claim(text: str) -> None:
    """The sentence a test checks is still on the Fidelity page (a reworded claim needs its test reviewed)."""
    assert text in FIDELITY, text


# --------------------------------------------------------------------------- ClarifyMT-Bench

def test_reference_actions_turn_1_clarify_precise_refusal_answer_after_one_reply_noisy_personas_always_clarify():
    claim("turn 1 clarify; Precise/Refusal answer after one reply; the four noisy personas clarify on every turn")
    assert reference_actions(PERSONA_BY_KEY["precise"]) == ["clarify", "answer"]
    assert reference_actions(PERSONA_BY_KEY["refusal"]) == ["clarify", "answer"]
    for key in ("partial_vague", "off_focus", "contradictory", "factually_wrong"):
        assert reference_actions(PERSONA_BY_KEY[key]) == ["clarify"] * 3


def test_data_sources_paper_preset_generator_shares_and_5_percent_clamber():
    claim("GPT-4.1 ~25%, DeepSeek-V3 ~25%, GPT-5 ~45%")
    assert sorted(g.share for g in PAPER.benchmark.generators) == [0.25, 0.25, 0.5]
    assert PAPER.benchmark.seed_dataset is not None and PAPER.benchmark.seed_dataset.share == pytest.approx(0.05)


def test_manual_validation_sheet_covers_10_percent_by_default():
    claim("a sheet covers what the annotators filled (default 10%)")
    assert DEMO.benchmark.validation.sheet_fraction == 0.1


def test_paper_sizes_85_per_subtype_k5_30_judged_every_dialogue_100_pairwise():
    claim("85 per subtype (1,020), 6,120 dialogues, k=5, 30 judged per subtype")
    assert PAPER.benchmark.n_per_subtype == 85 and PAPER.evaluation.max_dialogues is None
    assert (PAPER.evaluation.vote_k, PAPER.evaluation.intent_k, PAPER.evaluation.judge_per_subtype) == (5, 5, 30)


def test_paper_sizes_token_budgets_raised_so_no_reply_is_cut():
    claim("token budgets raised so no reply is cut (`truncated_share` per method)")
    for key in ("subject_max_tokens", "reasoning_max_tokens", "agent_max_tokens"):
        assert getattr(PAPER.evaluation, key) > getattr(DEMO.evaluation, key)


def test_paper_sizes_nothing_refills_removed_items():
    """85 generation slots per subtype and no refill: the plan never holds more than n_per_subtype per subtype."""
    from dagster_project.core.clarifymt.benchmark import generation_plan
    from dagster_project.core.shared.taxonomy import QUERY_SUBTYPES

    claim("deduplication and validation then remove items and nothing refills them")
    plan = generation_plan(list(QUERY_SUBTYPES), 85)
    assert plan.height == 85 * 12


@pytest.mark.parametrize("structured", [False, True])
def test_reply_format_every_final_decision_goes_through_one_channel(structured):
    claim("every final decision of a comparison goes through one channel")
    for name in BUILDERS:
        chat = Chat(_any_reply)
        build_method(name, EvaluationConfig(vote_k=2, intent_k=2, structured_output=structured)).predict(
            [turn("x", 2, A1)], chat, lambda texts: np.ones((len(texts), 3)))
        assert all((r.json_schema is not None) == structured for r in chat.batches[-1]), name


def test_reply_format_a_broken_agent_output_is_invalid_as_for_a_baseline():
    claim("ClarifyAgent's decision is its Output module's reply in that channel, and a broken one is `invalid` "
          "as for a baseline")
    inner = agent_reply("unfilled")
    [p] = ClarifyAgent(EvaluationConfig()).predict(
        [turn()], Chat(lambda r, i: "no prefix here" if r.json_schema is None else inner(r, i)))
    assert (p.action, p.status) == ("invalid", "parse_error")


def test_planner_parse_failure_the_rule_plans_and_it_is_a_step_error():
    claim("a Planner reply that fails to parse: the rule plans (`rule_fallback`)")
    [p] = ClarifyAgent(EvaluationConfig()).predict([turn()], Chat(agent_reply("unfilled", planner=lambda _: "??")))
    assert p.agent["decided_by"] == "rule_fallback" and "planner" in p.trace["step_errors"] and p.protocol_ok < 1


def test_clarify_reply_form_action_only_accuracy_by_default():
    claim("action-only accuracy by default")
    df = pl.DataFrame({"reference_action": ["clarify"], "action": ["clarify"], "status": ["ok"],
                       "is_question": [False]})
    assert clarification_metrics(df, []).row(0, named=True)["accuracy"] == 1.0
    assert clarification_metrics(df, [], clarify_must_be_question=True).row(0, named=True)["accuracy"] == 0.0


def _pairs(n_queries: int, copies: int = 1) -> pl.DataFrame:
    rows = []
    for i in range(n_queries):
        for k in range(copies):
            for method in ("clarify_agent", "base", "clarify_agent_no_planner"):
                rows.append({"dataset": "d", "subject": "s", "method": method, "query_id": f"q{i}",
                             "dialogue_id": f"q{i}-{k}", "turn": 2, "persona": "off_focus", "subtype": "goal",
                             "reference_action": "clarify", "action": "clarify" if method == "clarify_agent"
                             else "answer", "status": "ok", "llm_calls": 1})
    return pl.DataFrame(rows)


def test_significance_agent_tested_against_the_baselines_only_holm_corrected():
    claim("ClarifyAgent tested against `significance_baselines` only, Holm-corrected")
    rows = {r["method"]: r for r in method_comparison(_pairs(12), min_n=10).filter(
        pl.col("scope") == "turn_2").to_dicts()}
    assert rows["base"]["significant"] is True and rows["base"]["correction"].startswith("holm")
    assert rows["clarify_agent_no_planner"]["significant"] is None


def test_significance_nothing_marked_below_min_n_significance_paired_queries():
    claim("nothing marked below `min_n_significance` paired queries")
    base = method_comparison(_pairs(8, copies=3), min_n=10).filter(
        (pl.col("scope") == "turn_2") & (pl.col("method") == "base")).row(0, named=True)
    assert base["n_paired"] == 24 and base["n_paired_queries"] == 8 and base["significant"] is False


def test_significance_a_querys_shared_turn_1_counted_once():
    claim("a query's shared turn 1 counted once")
    rows = [{"query_id": "q", "dialogue_id": f"q-{k}", "turn": 1, "reference_action": "clarify",
             "action": "clarify", "status": "ok"} for k in range(6)]
    rows.append({"query_id": "q", "dialogue_id": "q-0", "turn": 2, "reference_action": "answer",
                 "action": "clarify", "status": "ok"})
    r = clarification_metrics(pl.DataFrame(rows), []).row(0, named=True)
    assert r["n_independent"] == pytest.approx(2) and r["accuracy"] == pytest.approx(0.5)


def test_significance_ttest_undefined_at_tiny_n_uses_the_exact_test():
    claim("The t-test is undefined or anti-conservative at tiny n (p = 0 for two identical differences)")
    from dagster_project.core.shared.metrics import clustered_paired_test

    r = clustered_paired_test([1, 1], [0, 0], [1, 1], ["a", "b"])
    assert math.isnan(r["p_ttest"]) and r["test"] == "sign_flip" and r["p"] == pytest.approx(0.5)


def test_tracker_rsc_an_empty_slot_table_is_unknown_and_the_rule_asks():
    claim("an empty slot table is unknown (not RSC)")
    empty = Tracker()
    assert empty.rsc is False and rule_plan(empty, None).action == "clarify"


def test_intent_sim_paper_settings_k5_t07_tau05_and_any_second_intent_asks():
    claim("§6: k=5, T=0.7, tau=0.5")
    cfg = PAPER.evaluation
    assert (cfg.intent_k, cfg.intent_temperature, cfg.intent_tau) == (5, 0.7, 0.5)
    assert cfg.intent_entropy_threshold == 0.0


def test_at_cot_three_action_types_plus_none():
    claim("`at_cot`: the three types + none")
    assert ACTION_KEYS == ["semantic", "generalize", "specify", "none"]


# --------------------------------------------------------------------------- ClariLM

def test_pairwise_100_items_per_dataset_a_win_must_hold_in_both_orders():
    claim("`pairwise_items` (100) per dataset; judged in both orders, a win must hold in both")
    assert PAPER.evaluation.pairwise_items == 100 and PAPER.evaluation.pairwise_mode == "output"
    assert pairwise_outcome("first", "second") == "win" and pairwise_outcome("first", "first") == "tie"


def test_pairwise_judge_pairs_are_two_methods_on_the_same_subject():
    claim("`evaluation.judge_pairs` pairs two **methods** on the same subject model")
    rows = [{"dataset": "d", "subject": s, "method": m, "dialogue_id": "q", "turn": 1, "subtype": None,
             "reference_action": "answer", "reference_question": None, "status": "ok", "action": "answer",
             "response": f"{m} on {s}"} for s in ("model_a", "model_b") for m in ("base", "cot")]
    pairs = method_pairs(pl.DataFrame(rows), EvaluationConfig(methods=["base", "cot"], judge_pairs=[["base", "cot"]]))
    assert pairs.height == 2 and all(r["output_a"].endswith(r["subject"]) and r["output_b"].endswith(r["subject"])
                                     for r in pairs.to_dicts())


def test_assistant_turn_length_no_limit_by_default():
    claim("`logs.prefilter_max_chars`, default null (no limit)")
    assert DEMO.logs.prefilter_max_chars is None


def test_ql_language_filter_non_english_only_at_confidence_0_5():
    claim("`questions.ql_language_min_score` (0.5)")
    assert DEMO.questions.ql_language_min_score == 0.5


def test_our_test_fraction_is_a_param_demo_0_25():
    claim("the fraction is a param (demo 0.25)")
    assert DEMO.questions.test_fraction == 0.25


# --------------------------------------------------------------------------- double-turn, intents, retrieval

def test_double_turn_labels_ties_go_to_the_direct_answer():
    claim("EM per simulated user, mean over users, ties go to the direct answer")
    a, b = {"score": 0.5, "kind": "clarify"}, {"score": 0.5, "kind": "direct"}
    assert prefer(a, b, direct_wins_ties=True)[0] is b


def test_sdrs_alpha_half_zero_for_a_wrong_intent_single_turn_gets_a():
    claim("alpha * A + (1 - alpha) * R, 0 for a wrong intent")
    assert DEMO.intents.alpha == 0.5
    assert sdrs([1.0, 0.5], [0.5], correct=True)["SDRS"] == pytest.approx(0.5 * 0.75 + 0.5 * 0.5)
    assert sdrs([1.0, 0.5], [0.5], correct=False)["SDRS"] == 0.0
    assert sdrs([0.8], None, correct=True)["SDRS"] == pytest.approx(0.8)


def test_curation_keeps_exactly_ceil_n_times_85_percent():
    claim("exactly ceil(n * 0.85)")
    assert DEMO.intents.keep_percentile == 85
    assert [keep_count(n, 85) for n in (1, 7, 20, 100)] == [1, 6, 17, 85]


def test_label_dropout_the_demo_adds_2():
    claim("the demo adds 2")
    assert DEMO.intents.n_label_dropout == 2


def test_retrieval_first_stage_bm25_top_100_and_metrics_at_1_3_5():
    claim("bm25s top `first_stage_k` (100)")
    assert DEMO.retrieval.first_stage_k == 100 and DEMO.retrieval.ks == [1, 3, 5]


def test_retrieval_sessions_of_2_to_4_turns_demo_2_per_length():
    claim("demo `per_length: 2`")
    assert DEMO.retrieval.turn_lengths == [2, 3, 4] and DEMO.retrieval.per_length == 2


def test_fm_log_a_3_shot_prompt_stands_in_for_the_fine_tuned_model():
    claim("by default a 3-shot prompt stands in for the paper's fine-tuned FM-LOG model")
    assert DEMO.facets.log_demos == 3
    assert "extractor:fm_log" not in DEMO.llm.roles and "fm_log" not in DEMO.training.models


def test_fm_log_trained_model_on_kept_extractions_plus_6_demonstrations_in_the_same_prompt():
    from dagster_project.core.clarilm.facets import FM_LOG
    from dagster_project.core.clarilm.fm_log_data import fm_log_template, shipped_demonstrations

    claim("Opt-in: `training/fm_log`, LoRA SFT of the base on the kept log extractions plus the extraction prompts' "
          "6 positive demonstrations, in the same prompt")
    assert shipped_demonstrations().height == 6
    assert FM_LOG.role == "extractor:fm_log" and fm_log_template().user.startswith(FM_LOG.template.user.rstrip())
