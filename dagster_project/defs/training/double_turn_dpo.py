"""The double-turn DPO chain of the training group (paper §4.1: SFT first, DPO candidates sampled from the SFT model).

double_turn_sft -> double_turn_dpo_candidates -> double_turn_dpo_simulations -> double_turn_dpo_outcomes
                                              -> double_turn_dpo_judge_scores -----------------/
    -> double_turn_dpo_pairs -> double_turn_dpo_exports -> double_turn_dpo, single_turn_dpo (from the SFT adapter)

The candidates come from training/double_turn_sft served through the LLM resource in the prompt it learned; the
users, answers after clarifying, judge and pairs are the double_turn group's own core steps on them. The DPO-stage
queries are the training queries the SFT stage did not use (double_turn.sft_fraction). Without an SFT model (not in
training.models, or its stage built none) nothing is sampled and both DPO models are skipped with the reason.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from dagster_project.config import Params, RoleConfig
from dagster_project.config.llm import trained_role
from dagster_project.core.double_turn import preferences, qa, simulation, split
from dagster_project.core.double_turn.candidates import CANDIDATE_SCHEMA
from dagster_project.core.double_turn.exports import dpo_exports
from dagster_project.core.double_turn.sft_candidates import sft_candidates
from dagster_project.core.shared.tables import markdown_table
from dagster_project.core.training.formats import trl_dpo_rows
from dagster_project.core.training.template import double_turn_template, load_trained_template
from dagster_project.defs.training import assets as training  # its model helpers (_lm, _emit, ...)
from dagster_project.lib.assets import status_counts, upstream
from dagster_project.lib.jsonl_exports import write_exports
from dagster_project.lib.resources import LLMResource
from dagster_project.training.exports import model_template
from dagster_project.training.lm_training import ADAPTER, LMJob
from dagster_project.training.model_folder import result_row

SFT = "double_turn_sft"
EXPORTS = "double_turn_dpo_exports"
DPO_MODELS = {"double_turn_dpo": "dpo_dataset", "single_turn_dpo": "dpo_single_turn"}  # model -> its export


def exports_dir() -> Path:
    return training.models_root() / "exports" / "double_turn"


def sft_subject(params: Params) -> tuple[str, RoleConfig]:
    """The subject that serves training/double_turn_sft: its llm.subjects entry when params has one, else a subject
    of that name served like the reference (evaluation.trained_baseline; config/llm.py `trained_role`)."""
    model = f"training/{SFT}"
    for name, role in params.llm.subjects.items():
        if role.model == model:
            return name, role
    return SFT, trained_role(params.llm.subjects.get(params.evaluation.trained_baseline or ""), model)


def _checked_template(params: Params, subject: str) -> None:
    """The SFT model must have learned the prompt the candidates are asked in (else the export was built with other
    params): a mismatch fails, naming the folder and both templates."""
    want = double_turn_template(params.double_turn.subject_output)
    got = load_trained_template(f"training/{SFT}", subject)
    if got.version != want.version:
        raise ValueError(f"training/{SFT} recorded template {got.version}, but the DPO candidates are asked in "
                         f"{want.version} (double_turn.subject_output: {params.double_turn.subject_output}); "
                         f"retrain {SFT} with the current params")


def assets(asset: Any, enabled: set[str]) -> list[Any]:
    """The chain's assets when a DPO model is enabled: with double_turn_sft, candidates from it -> ... -> the DPO
    models; without it, only the DPO models, each skipped with the reason."""
    wanted = [m for m in DPO_MODELS if m in enabled]
    if not wanted:
        return []
    if SFT not in enabled:
        return [_skipped_asset(asset, m) for m in wanted]
    return [*_chain(asset), *(_dpo_asset(asset, m) for m in wanted)]


def _chain(asset: Any) -> list[Any]:
    @asset(ins=upstream("double_turn/qa_sets", f"training/{SFT}"))
    def double_turn_dpo_candidates(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                                   llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame,
                                   double_turn_sft: pl.DataFrame) -> pl.DataFrame:
        """Per DPO-stage training query, from training/double_turn_sft in the Clarify-or-Direct prompt it learned: a
        greedy and double_turn.n_clarify_sampled sampled clarifying questions and one greedy direct answer (JSON
        replies; free text: replies as the model decided), core/double_turn/sft_candidates.py. None when the SFT
        stage built no model (metadata says why)."""
        cfg = params.double_turn
        queries = split.stage_queries(qa.selected(qa_sets, "train"), "dpo", cfg.seed, cfg.sft_fraction)
        why = training.sft_stage_missing(double_turn_sft, SFT, "the DPO candidates")
        if why:
            context.log.warning(why)
            context.add_output_metadata({"queries": queries.height, "skipped": why})
            return pl.DataFrame(schema=CANDIDATE_SCHEMA)
        subject, role = sft_subject(params)
        _checked_template(params, subject)
        chat = llm.with_subjects({subject: role}).session(context)
        out = sft_candidates(chat, f"subject:{subject}", queries, cfg)
        context.add_output_metadata({
            **chat.usage(), "queries": queries.height, "stage": "dpo", "sampled_from": role.model,
            "in_pairs": int(out["in_pairs"].sum()), **status_counts(out),
            "by_kind": dg.MetadataValue.json(dict(out.group_by("kind").len().iter_rows())),
            "queries_without_direct": queries.height - out.filter(
                (pl.col("kind") == "direct") & pl.col("in_pairs"))["query_id"].n_unique()})
        return out

    @asset(ins=upstream("double_turn/qa_sets", "training/double_turn_dpo_candidates"))
    def double_turn_dpo_simulations(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource],
                                    qa_sets: pl.DataFrame, double_turn_dpo_candidates: pl.DataFrame) -> pl.DataFrame:
        """psi(x, q, y_i) -> a_i (label_simulator) for every clarifying candidate of the SFT model and user."""
        chat = llm.session(context)
        out = simulation.user_simulations(chat, double_turn_dpo_candidates, qa_sets)
        context.add_output_metadata({**chat.usage(), "simulations": out.height,
                                     "abstained": int(out["abstained"].sum())})
        return out

    @asset(ins=upstream("double_turn/qa_sets", "training/double_turn_dpo_candidates",
                        "training/double_turn_dpo_simulations"))
    def double_turn_dpo_outcomes(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                                 llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame,
                                 double_turn_dpo_candidates: pl.DataFrame,
                                 double_turn_dpo_simulations: pl.DataFrame) -> pl.DataFrame:
        """The answerer's answer after each usable user reply; EM per user; a candidate's score = mean over users."""
        chat = llm.session(context)
        out = preferences.double_turn_outcomes(chat, qa_sets, double_turn_dpo_candidates, double_turn_dpo_simulations,
                                               params.double_turn.answer_max_tokens)
        context.add_output_metadata({**chat.usage(), "outcomes": out.height})
        return out

    @asset(ins=upstream("training/double_turn_dpo_candidates"))
    def double_turn_dpo_judge_scores(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource],
                                     double_turn_dpo_candidates: pl.DataFrame) -> pl.DataFrame:
        """The single-turn scheme on the same candidates: the judge scores each seeing only the query (1-10)."""
        chat = llm.session(context)
        out = preferences.single_turn_scores(chat, double_turn_dpo_candidates.filter(pl.col("in_pairs")))
        context.add_output_metadata({**chat.usage(), **status_counts(out)})
        return out

    @asset(ins=upstream("training/double_turn_dpo_candidates", "training/double_turn_dpo_outcomes",
                        "training/double_turn_dpo_judge_scores"))
    def double_turn_dpo_pairs(context: dg.AssetExecutionContext, double_turn_dpo_candidates: pl.DataFrame,
                              double_turn_dpo_outcomes: pl.DataFrame,
                              double_turn_dpo_judge_scores: pl.DataFrame) -> pl.DataFrame:
        """Every pair of a query's SFT candidates under both labelings (double_turn, single_turn)."""
        out = preferences.preference_pairs(double_turn_dpo_candidates, double_turn_dpo_outcomes,
                                           double_turn_dpo_judge_scores)
        context.add_output_metadata({"pairs": out.height, "kept": dg.MetadataValue.json(
            {lab: int(g["kept"].sum()) for (lab,), g in out.group_by(["labeling"])})})
        return out

    @dg.asset(
        key=[training.GROUP, EXPORTS], group_name=training.GROUP, kinds={"polars"},
        ins=upstream("double_turn/qa_sets", "training/double_turn_dpo_pairs"),
        check_specs=[dg.AssetCheckSpec("no_train_eval_overlap", asset=[training.GROUP, EXPORTS], blocking=True,
                                       description="No evaluation query (id or question) in the DPO pairs or "
                                                   "exports; on a leak nothing is written.")],
    )
    def double_turn_dpo_exports(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                                qa_sets: pl.DataFrame, double_turn_dpo_pairs: pl.DataFrame):
        """The DPO JSONL files (dpo_dataset, dpo_single_turn and their clarify-only subsets) of the SFT model's
        pairs under assets/training/exports/double_turn/, in the Clarify-or-Direct prompt; one row per file."""
        datasets = dpo_exports(double_turn_dpo_pairs, params.double_turn.subject_output)
        leaks = split.train_eval_overlap({"double_turn_dpo_pairs": double_turn_dpo_pairs}, datasets,
                                         qa_sets.filter(pl.col("use") == "eval"))
        out = write_exports(context, exports_dir(), datasets,
                            f"blocked: {leaks.height} evaluation leak(s)" if leaks.height else None)
        yield dg.Output(out, metadata={"written": int(out["written"].sum()), "train_eval_overlap": leaks.height,
                                       "rows": dg.MetadataValue.json(dict(zip(out["export"], out["rows"],
                                                                              strict=True)))})
        yield dg.AssetCheckResult(check_name="no_train_eval_overlap", passed=leaks.height == 0,
                                  severity=dg.AssetCheckSeverity.ERROR,
                                  metadata={"leaks": leaks.height,
                                            "examples": dg.MetadataValue.md(markdown_table(leaks.head(10)))})

    return [double_turn_dpo_candidates, double_turn_dpo_simulations, double_turn_dpo_outcomes,
            double_turn_dpo_judge_scores, double_turn_dpo_pairs, double_turn_dpo_exports]


def _dpo_asset(asset: Any, name: str) -> Any:
    export = DPO_MODELS[name]

    @asset(name=name, ins=upstream(f"training/{EXPORTS}", f"training/{SFT}"),
           description=f"DPO on the {export} export of the SFT model's own candidates (training/{EXPORTS}), "
                       f"continuing training/{SFT} (its adapter is recorded as init_adapter); skipped with the "
                       "reason when the SFT stage built no model. Table 1 compares double-turn vs single-turn labels.")
    def _dpo(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], double_turn_dpo_exports: pl.DataFrame,
             double_turn_sft: pl.DataFrame) -> pl.DataFrame:
        records, source, why = training._export_rows(double_turn_dpo_exports, export, f"training/{EXPORTS}")
        rows, same = trl_dpo_rows(records, source)
        missing = training.sft_stage_missing(double_turn_sft, SFT, name)
        if missing:
            context.log.warning(missing)
            return training._emit(context, training._table([result_row(name, "dpo", "skipped_no_data",
                                                                     f"training/{EXPORTS}", len(rows), missing)]))
        job = LMJob(name, "dpo", rows, f"training/{EXPORTS}:{export}", training.models_root() / SFT / ADAPTER,
                    template=model_template(name, params).record())
        return training._emit(context, training._table([training._lm(params, job, why, same)]))

    return _dpo


def _skipped_asset(asset: Any, name: str) -> Any:
    @asset(name=name, description=f"{name}: skipped, training.models lacks {SFT} (its DPO candidates are sampled "
                                  "from that model and DPO continues it, as in the paper).")
    def _skipped(context: dg.AssetExecutionContext) -> pl.DataFrame:
        why = (f"{name} continues {SFT} and learns from its sampled candidates; add {SFT} to training.models "
               "(not trained from the base instead)")
        context.log.warning(why)
        row = result_row(name, "dpo", "skipped_no_data", f"training/{EXPORTS}", 0, why)
        return training._emit(context, training._table([row]))

    return _skipped
