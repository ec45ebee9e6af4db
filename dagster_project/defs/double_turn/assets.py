"""Group `double_turn`: double-turn preference labelling and answer-set F1 evaluation (Zhang, Knox & Choi).

qa_sets (+ qa_sets_rejected) -> feasible_answers -> clarify_sft ------------------------\
qa_sets -> candidate_responses -> user_simulations -> double_turn_outcomes -> preference_pairs -> training_exports
                               -> single_turn_scores -----------------------/
qa_sets -> eval_interactions -> answer_set_eval
qa_sets has a disjoint `use` (train / eval); training_exports writes the TRL-ready JSONL files under
assets/double_turn/exports/ after a blocking check that no evaluation query reached them.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.double_turn import (
    answer_set,
    answers,
    candidates,
    evaluation,
    exports,
    preferences,
    qa,
    sft,
    simulation,
    split,
)
from dagster_project.core.shared.tables import markdown_table
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.jsonl_exports import write_exports
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR
from dagster_project.llm.chat import usage_key
from dagster_project.llm.client import LLMSession
from dagster_project.llm.identity import cache_identity

GROUP = "double_turn"
asset = group_asset(GROUP)


def export_dir() -> Path:
    return Path(ASSETS_DIR) / GROUP / "exports"


def simulators_same_model(params: Params) -> bool:
    """True when label_simulator and eval_simulator resolve to the same model (as in the demo)."""
    return cache_identity(params.llm.role("label_simulator")) == cache_identity(params.llm.role("eval_simulator"))


def usage(chat: LLMSession, n_queries: int) -> dict[str, Any]:
    """The session's usage and LLM samples (a request with n samples counts n) per query, all roles together."""
    meta = chat.usage()
    samples = meta[usage_key("samples")]
    return meta | {usage_key("samples_per_query"): round(samples / n_queries, 2) if n_queries else 0.0}


@dg.multi_asset(
    group_name=GROUP,
    outs={"qa_sets": dg.AssetOut(key=[GROUP, "qa_sets"], kinds={"polars"},
                                 description="One row per query with its interpretations (answers = alias lists)."),
          "qa_sets_rejected": dg.AssetOut(key=[GROUP, "qa_sets_rejected"], kinds={"polars"},
                                          description="Quarantined input records (io.records Quarantine).")},
)
def qa_sets(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]):
    """Import every file in double_turn.inputs; give each query one use (train / eval, disjoint: `split: both`
    files by a seeded hash of the id) and mark the queries each use selects."""
    table, rejected, files = qa.import_qa_sets(params.double_turn)
    meta = {"records_read": sum(f.n_read for f in files), "queries": table.height, "rejected": len(rejected),
            "ambiguous": int(table["is_ambiguous"].sum()), "use_train": int((table["use"] == "train").sum()),
            "use_eval": int((table["use"] == "eval").sum()), "selected_train": int(table["selected_train"].sum()),
            "selected_eval": int(table["selected_eval"].sum())}
    context.log.info(f"double_turn inputs: {meta}")
    yield dg.Output(table, output_name="qa_sets", metadata=meta)
    yield dg.Output(rejected.frame(), output_name="qa_sets_rejected",
                    metadata={"rejected": len(rejected),
                              "by_file": dg.MetadataValue.json({f.file: len(f.quarantine) for f in files})})


@asset(ins=upstream("double_turn/qa_sets"))
def feasible_answers(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                     llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Y_human from the annotations and Y_model from a few-shot base completion of the answerer (greedy + T=1.0
    per round, shots from training queries only), for the SFT stage's training queries (double_turn.sft_fraction:
    disjoint from the DPO stage's)."""
    chat = llm.session(context)
    cfg = params.double_turn
    queries = split.stage_queries(qa.selected(qa_sets, "train"), "sft", cfg.seed, cfg.sft_fraction)
    out = answers.feasible_answers(chat, queries, answers.shot_pool(qa_sets), cfg)
    context.add_output_metadata({
        **usage(chat, out.height), "queries": out.height, "stage": "sft", **status_counts(out),
        "model_filter_passed": int(out["model_filter_passed"].sum()), "y_model_filter": cfg.y_model_filter,
        "y_model_dropped": int(out["y_model_dropped"].list.len().sum() or 0),
        "filtered_no_gold_match": int((~out["model_filter_passed"]).sum()),
        "mean_model_answers": round(float(out["n_model_answers"].mean() or 0), 2),
    })
    return out


@asset(ins=upstream("double_turn/feasible_answers"))
def clarify_sft(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                llm: dg.ResourceParam[LLMResource], feasible_answers: pl.DataFrame) -> pl.DataFrame:
    """(x, q) and (x, q, a_i, y_i) SFT rows from the generator (it may decline a query or keep a subset of
    its feasible answers), for the feasible sets in double_turn.sft_answer_sets."""
    chat = llm.session(context)
    cfg = params.double_turn
    out = sft.clarify_sft(chat, feasible_answers, cfg.generator_max_tokens, cfg.sft_answer_sets)
    xq = out.filter(pl.col("row_type") == "clarify")
    context.add_output_metadata({
        **usage(chat, feasible_answers.height),
        "xq_rows": xq.height, "xqay_rows": out.height - xq.height, "kept": int(out["kept"].sum()),
        "declined": int(xq["reason"].str.starts_with("generator declined").sum()),
        "answer_sets": dg.MetadataValue.json(list(cfg.sft_answer_sets)),
        "by_source": dg.MetadataValue.json(dict(out.group_by("answer_source").len().iter_rows())),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets"))
def candidate_responses(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Per DPO-stage training query (disjoint from the SFT stage's, double_turn.sft_fraction): clarifying questions
    (clarifier, 1 greedy + n sampled), the greedy direct answer and the Direct-Ans sampled pool (answerer)."""
    chat = llm.session(context)
    cfg = params.double_turn
    queries = split.stage_queries(qa.selected(qa_sets, "train"), "dpo", cfg.seed, cfg.sft_fraction)
    out = candidates.candidate_responses(chat, queries, answers.shot_pool(qa_sets), cfg)
    context.add_output_metadata({
        **usage(chat, queries.height), "queries": queries.height, "stage": "dpo",
        "in_pairs": int(out["in_pairs"].sum()),
        "by_kind": dg.MetadataValue.json(dict(out.group_by("kind").len().iter_rows())),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets", "double_turn/candidate_responses"))
def user_simulations(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame,
                     candidate_responses: pl.DataFrame) -> pl.DataFrame:
    """psi(x, q, y_i) -> a_i by the label_simulator role for every clarifying candidate and user; leaks and
    abstains are marked."""
    chat = llm.session(context)
    out = simulation.user_simulations(chat, candidate_responses, qa_sets)
    context.add_output_metadata({
        **usage(chat, candidate_responses["query_id"].n_unique()), "simulations": out.height,
        "abstained": int(out["abstained"].sum()),
        "abstain_reasons": dg.MetadataValue.json(
            {str(k): v for k, v in out.group_by("abstain_reason").len().iter_rows()}),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets", "double_turn/candidate_responses", "double_turn/user_simulations"))
def double_turn_outcomes(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                         llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame,
                         candidate_responses: pl.DataFrame, user_simulations: pl.DataFrame) -> pl.DataFrame:
    """The answerer's answer after each non-abstained user reply; EM per user; score(q) = mean over users."""
    chat = llm.session(context)
    out = preferences.double_turn_outcomes(chat, qa_sets, candidate_responses, user_simulations,
                                          params.double_turn.answer_max_tokens)
    scores = out.group_by("candidate_id", "kind").agg(pl.col("candidate_score").first())

    def mean_score(kind: str) -> float:
        return round(float(scores.filter(pl.col("kind") == kind)["candidate_score"].mean() or 0), 3)

    context.add_output_metadata({**usage(chat, candidate_responses["query_id"].n_unique()), "outcomes": out.height,
                                 "mean_score_clarify": mean_score("clarify"), "mean_score_direct": mean_score("direct")})
    return out


@asset(ins=upstream("double_turn/candidate_responses"))
def single_turn_scores(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource],
                       candidate_responses: pl.DataFrame) -> pl.DataFrame:
    """The standard single-turn scheme: the judge scores each candidate seeing only the query (1-10)."""
    cands = candidate_responses.filter(pl.col("in_pairs"))
    chat = llm.session(context)
    out = preferences.single_turn_scores(chat, cands)
    context.add_output_metadata({**usage(chat, cands["query_id"].n_unique()), **status_counts(out),
                                 "scored": int(out["judge_score"].is_not_null().sum())})
    return out


@asset(ins=upstream("double_turn/candidate_responses", "double_turn/double_turn_outcomes",
                    "double_turn/single_turn_scores"))
def preference_pairs(context: dg.AssetExecutionContext, candidate_responses: pl.DataFrame,
                     double_turn_outcomes: pl.DataFrame, single_turn_scores: pl.DataFrame) -> pl.DataFrame:
    """All candidate pairs per query under both labelings (double_turn, single_turn)."""
    out = preferences.preference_pairs(candidate_responses, double_turn_outcomes, single_turn_scores)
    summary = out.group_by("labeling", "reason").len().sort("labeling", "reason")
    context.add_output_metadata({
        "pairs_kept": dg.MetadataValue.json({lab: int(g["kept"].sum()) for (lab,), g in out.group_by(["labeling"])}),
        "reasons": dg.MetadataValue.md(markdown_table(summary)),
    })
    return out


@dg.asset(
    key=[GROUP, "training_exports"], group_name=GROUP, kinds={"polars"},
    ins=upstream("double_turn/qa_sets", "double_turn/clarify_sft", "double_turn/preference_pairs"),
    check_specs=[dg.AssetCheckSpec("no_train_eval_overlap", asset=[GROUP, "training_exports"], blocking=True,
                                   description="No evaluation query (id or question) in any training table or "
                                               "export; on a leak nothing is written.")],
)
def training_exports(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], qa_sets: pl.DataFrame,
                     clarify_sft: pl.DataFrame, preference_pairs: pl.DataFrame):
    """TRL-ready SFT / DPO JSONL files under exports/, each rendered from its system's evaluation prompt;
    one row per file (rows, written or why not). Empty files are skipped with a warning."""
    output = params.double_turn.subject_output
    datasets = exports.sft_exports(clarify_sft, output) | exports.dpo_exports(preference_pairs, output)
    leaks = split.train_eval_overlap({"clarify_sft": clarify_sft, "preference_pairs": preference_pairs},
                                     datasets, qa_sets.filter(pl.col("use") == "eval"))
    out = write_exports(context, export_dir(), datasets, f"blocked: {leaks.height} evaluation leak(s)" if leaks.height else None)
    yield dg.Output(out, metadata={
        "written": int(out["written"].sum()), "skipped_empty": out.filter(pl.col("reason").str.starts_with("empty"))["export"].to_list(),
        "rows": dg.MetadataValue.json(dict(zip(out["export"], out["rows"], strict=True))),
        "train_eval_overlap": leaks.height,
        "sft_dpo_shared_queries": len(split.shared_queries(clarify_sft, preference_pairs))})
    yield dg.AssetCheckResult(check_name="no_train_eval_overlap", passed=leaks.height == 0,
                              severity=dg.AssetCheckSeverity.ERROR,
                              metadata={"leaks": leaks.height,
                                        "examples": dg.MetadataValue.md(markdown_table(leaks.head(10)))})


@asset(ins=upstream("double_turn/qa_sets"))
def eval_interactions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Every subject x system x eval query: turn 2, the eval_simulator's user replies, answers after
    clarifying, F1."""
    cfg = params.double_turn
    subjects = evaluation.eval_subjects(cfg, params.untrained_subjects())
    queries = qa.selected(qa_sets, "eval")
    chat = llm.session(context)
    out = evaluation.eval_interactions(chat, qa_sets, queries, subjects, cfg)
    same = simulators_same_model(params)
    if same:
        context.log.warning("label_simulator and eval_simulator are the same model: the policy is judged by the "
                            "simulator that labelled its training preferences (the paper uses two)")
    context.add_output_metadata({**usage(chat, queries.height), **status_counts(out), "episodes": out.height,
                                 "user_simulations": int(out["user_replies"].list.len().sum() or 0),
                                 "eval_queries": queries.height, "simulators_same_model": same})
    return out


@asset(ins=upstream("double_turn/eval_interactions"))
def answer_set_eval(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                    eval_interactions: pl.DataFrame) -> pl.DataFrame:
    """Table 1 (avg turns, answer-set F1 Unambiguous / Ambiguous / Total, paired-bootstrap significance against
    every other system) and Table 4 (DA%, DA accuracy, random baseline at the same DA%) per subject model."""
    cfg = params.double_turn
    out = answer_set.answer_set_table(eval_interactions, cfg.random_repeats, cfg.seed, cfg.bootstrap_samples,
                                      cfg.significance_alpha)
    view = out.select("subject", "label", "avg_turns", "f1_unambiguous", "f1_ambiguous", "f1_total",
                      "da_rate", "da_accuracy", "p_max_vs_others", "significant"
                      ).with_columns(pl.col(pl.Float64).round(3).cast(pl.Utf8))
    context.add_output_metadata({"table": dg.MetadataValue.md(markdown_table(view)),
                                 "simulators_same_model": simulators_same_model(params)})
    return out
