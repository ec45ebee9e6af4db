"""Group `double_turn`: double-turn preference labelling and answer-set F1 evaluation (Zhang, Knox & Choi).

qa_sets (+ qa_sets_rejected) -> feasible_answers -> clarify_sft
qa_sets -> candidate_responses -> user_simulations -> double_turn_outcomes -> preference_pairs
                               -> single_turn_scores -----------------------/
qa_sets -> eval_interactions -> answer_set_eval
TRL-ready JSONL exports are written next to the Parquet files, under assets/double_turn/exports/.
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
)
from dagster_project.core.shared.tables import markdown_table
from dagster_project.io.writers import write_jsonl_atomic
from dagster_project.lib.assets import group_asset, status_counts, upstream
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR
from dagster_project.llm.client import LLMSession

GROUP = "double_turn"
asset = group_asset(GROUP)


def export_dir() -> Path:
    return Path(ASSETS_DIR) / GROUP / "exports"


def write_exports(datasets: dict[str, list[dict[str, Any]]]) -> dg.MetadataValue:
    """Each dataset as assets/double_turn/exports/<name>.jsonl (atomic); their paths for metadata."""
    paths = {name: export_dir() / f"{name}.jsonl" for name in datasets}
    for name, records in datasets.items():
        write_jsonl_atomic(records, paths[name])
    return dg.MetadataValue.json({n: str(p) for n, p in paths.items()})


def usage(chat: LLMSession, n_queries: int) -> dict[str, Any]:
    """The session's usage and LLM samples (a request with n samples counts n) per query, all roles together."""
    meta = chat.usage()
    return meta | {"llm_samples_per_query": round(meta["llm_samples"] / n_queries, 2) if n_queries else 0.0}


@dg.multi_asset(
    group_name=GROUP,
    outs={"qa_sets": dg.AssetOut(key=[GROUP, "qa_sets"], kinds={"polars"},
                                 description="One row per query with its interpretations (answers = alias lists)."),
          "qa_sets_rejected": dg.AssetOut(key=[GROUP, "qa_sets_rejected"], kinds={"polars"},
                                          description="Quarantined input records (io.records Quarantine).")},
)
def qa_sets(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]):
    """Import every file in double_turn.inputs; mark the queries each use (train / eval) selects."""
    table, rejected, files = qa.import_qa_sets(params.double_turn)
    meta = {"records_read": sum(f.n_read for f in files), "queries": table.height, "rejected": len(rejected),
            "ambiguous": int(table["is_ambiguous"].sum()), "selected_train": int(table["selected_train"].sum()),
            "selected_eval": int(table["selected_eval"].sum())}
    context.log.info(f"double_turn inputs: {meta}")
    yield dg.Output(table, output_name="qa_sets", metadata=meta)
    yield dg.Output(rejected.frame(), output_name="qa_sets_rejected",
                    metadata={"rejected": len(rejected),
                              "by_file": dg.MetadataValue.json({f.file: len(f.quarantine) for f in files})})


@asset(ins=upstream("double_turn/qa_sets"))
def feasible_answers(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                     llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Y_human from the annotations and Y_model from few-shot answerer samples (greedy + T=1.0 per round)."""
    chat = llm.session(context)
    out = answers.feasible_answers(chat, qa.selected(qa_sets, "train"), answers.shot_pool(qa_sets),
                                   params.double_turn)
    context.add_output_metadata({
        **usage(chat, out.height), "queries": out.height, **status_counts(out),
        "model_filter_passed": int(out["model_filter_passed"].sum()),
        "filtered_no_gold_match": int((~out["model_filter_passed"]).sum()),
        "mean_model_answers": round(float(out["n_model_answers"].mean() or 0), 2),
    })
    return out


@asset(ins=upstream("double_turn/feasible_answers"))
def clarify_sft(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                llm: dg.ResourceParam[LLMResource], feasible_answers: pl.DataFrame) -> pl.DataFrame:
    """(x, q) and (x, q, a_i, y_i) SFT rows from the generator; TRL `messages` exports in exports/."""
    chat = llm.session(context)
    out = sft.clarify_sft(chat, feasible_answers, params.double_turn.generator_max_tokens)
    context.add_output_metadata({
        **usage(chat, feasible_answers.height),
        "xq_rows": out.filter(pl.col("row_type") == "clarify").height,
        "xqay_rows": out.filter(pl.col("row_type") == "answer").height,
        "kept": int(out["kept"].sum()),
        "by_source": dg.MetadataValue.json(dict(out.group_by("answer_source").len().iter_rows())),
        "exports": write_exports(exports.sft_exports(out)),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets"))
def candidate_responses(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Per query: clarifying questions (clarifier, 1 greedy + n sampled), the greedy direct answer and the
    Direct-Ans sampled pool (answerer)."""
    chat = llm.session(context)
    queries = qa.selected(qa_sets, "train")
    out = candidates.candidate_responses(chat, queries, answers.shot_pool(qa_sets), params.double_turn)
    context.add_output_metadata({
        **usage(chat, queries.height), "queries": queries.height, "in_pairs": int(out["in_pairs"].sum()),
        "by_kind": dg.MetadataValue.json(dict(out.group_by("kind").len().iter_rows())),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets", "double_turn/candidate_responses"))
def user_simulations(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame,
                     candidate_responses: pl.DataFrame) -> pl.DataFrame:
    """psi(x, q, y_i) -> a_i for every clarifying candidate and user; leaks and abstains are marked."""
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
    """All candidate pairs per query under both labelings (double_turn, single_turn); DPO exports."""
    out = preferences.preference_pairs(candidate_responses, double_turn_outcomes, single_turn_scores)
    summary = out.group_by("labeling", "reason").len().sort("labeling", "reason")
    context.add_output_metadata({
        "pairs_kept": dg.MetadataValue.json({lab: int(g["kept"].sum()) for (lab,), g in out.group_by(["labeling"])}),
        "reasons": dg.MetadataValue.md(markdown_table(summary)),
        "exports": write_exports(exports.dpo_exports(out)),
    })
    return out


@asset(ins=upstream("double_turn/qa_sets"))
def eval_interactions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Every subject x system x eval query: turn 2, simulated users' replies, answers after clarifying, F1."""
    cfg = params.double_turn
    subjects = evaluation.eval_subjects(cfg, list(params.llm.subjects))
    queries = qa.selected(qa_sets, "eval")
    chat = llm.session(context)
    out = evaluation.eval_interactions(chat, qa_sets, queries, subjects, cfg)
    context.add_output_metadata({**usage(chat, queries.height), **status_counts(out), "episodes": out.height,
                                 "user_simulations": int(out["user_replies"].list.len().sum() or 0),
                                 "eval_queries": queries.height})
    return out


@asset(ins=upstream("double_turn/eval_interactions"))
def answer_set_eval(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                    eval_interactions: pl.DataFrame) -> pl.DataFrame:
    """Table 1 (avg turns, answer-set F1 Unambiguous / Ambiguous / Total) and Table 4 (DA%, DA accuracy,
    random baseline at the same DA%) per subject model."""
    cfg = params.double_turn
    out = answer_set.answer_set_table(eval_interactions, cfg.random_repeats, cfg.seed)
    view = out.select("subject", "label", "avg_turns", "f1_unambiguous", "f1_ambiguous", "f1_total",
                      "da_rate", "da_accuracy").with_columns(pl.col(pl.Float64).round(3).cast(pl.Utf8))
    context.add_output_metadata({"table": dg.MetadataValue.md(markdown_table(view))})
    return out
