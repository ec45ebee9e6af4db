"""Double-turn Table 1 with trained subjects: the untrained base and every trained double_turn model (SFT, DPO on
double-turn labels, DPO on single-turn labels) through the double_turn group's own evaluation (turn 2 under the
four systems, simulated users, answers after clarifying, answer-set F1, turns, DA accuracy), in the template the
models were trained on; the comparisons behind the paper's claim, with its published gains beside ours."""

import dataclasses

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.double_turn import answer_set, evaluation, qa
from dagster_project.core.double_turn.headline import comparisons
from dagster_project.core.shared.tables import markdown_table
from dagster_project.defs.headlines.common import (
    GROUP,
    TrainedSubject,
    reference_subject,
    trained_subjects,
    unfair_reference,
    with_subjects,
)
from dagster_project.defs.headlines.published import DOUBLE_TURN_GAINS, DOUBLE_TURN_SOURCE, verdict
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset
from dagster_project.training.model_folder import RESULT_SCHEMA

asset = group_asset(GROUP)
# training.models entries of the double_turn chain -> their Table 1 row (SFT first, then DPO from it)
MODELS = {"double_turn_sft": "SFT", "double_turn_dpo": "DPO (double-turn labels)",
          "single_turn_dpo": "DPO (single-turn labels)"}
HEADLINE_PAIR = ("double_turn_dpo", "single_turn_dpo")
COMPARED_SYSTEM = "clarify_or_direct"  # the system the DPO exports are rendered in (dpo_dataset, dpo_single_turn)


def models(params: Params) -> list[str]:
    """The double_turn models training.models builds, in chain order."""
    return [m for m in MODELS if m in params.training.models]


def _subjects(params: Params) -> list[TrainedSubject]:
    """Each double_turn model's subject; a model whose training table is missing is not served, and says so."""
    rows = []
    for m in models(params):
        t = read_asset(ASSETS_DIR, "training", m)
        rows += t.to_dicts() if t is not None and t.height else [
            {"model": m, "status": "not_materialized", "reason": f"run `clarify materialize training` ({m})"}]
    return checked(trained_subjects(params, pl.DataFrame(rows, schema=RESULT_SCHEMA)))


PARSER_OUTPUT = {"double_turn_json": "json", "double_turn_text": "free_text"}  # template parser -> subject_output


def subject_output(params: Params, subjects: list[TrainedSubject]) -> str:
    """The reply format the served models learned (their recorded templates' parser); double_turn.subject_output
    when none is served."""
    outputs = {PARSER_OUTPUT.get(s.template.parser) for s in subjects if s.template and not s.missing}
    return outputs.pop() if len(outputs) == 1 else params.double_turn.subject_output


def checked(subjects: list[TrainedSubject]) -> list[TrainedSubject]:
    """Serve only models that learned the double-turn prompt in one reply format: a model with another recorded
    template (or a second format beside the first) is not served, and the reason names it."""
    out, first = [], None
    for s in subjects:
        output = PARSER_OUTPUT.get(s.template.parser) if s.template else None
        if not s.missing and (s.template is None or s.template.name != "double_turn" or output is None):
            version = s.template.version if s.template else "none"
            s = dataclasses.replace(s, missing=f"{s.model}: recorded template {version} is not the double-turn "
                                               "prompt this evaluation renders")
        elif not s.missing:
            first = first or output
            if output != first:
                s = dataclasses.replace(s, missing=f"{s.model}: learned {output} replies, the others {first}; "
                                                   "Table 1 serves one format")
        out.append(s)
    return out


def trained_interactions_asset(params: Params) -> dg.AssetsDefinition:
    """double_turn_trained_interactions, after the training assets of the double_turn models params builds."""

    @asset(name="double_turn_trained_interactions", ins=upstream("double_turn/qa_sets"),
           deps=[dg.AssetKey(["training", m]) for m in models(params)])
    def double_turn_trained_interactions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                                         llm: dg.ResourceParam[LLMResource], qa_sets: pl.DataFrame) -> pl.DataFrame:
        """Every servable trained double_turn model and the base (evaluation.trained_baseline) x system x
        evaluation query, exactly as double_turn/eval_interactions runs the untrained subjects."""
        subjects = _subjects(params)
        base = reference_subject(params)
        trained = [s.subject for s in subjects if not s.missing]
        served = ([base] if base and trained else []) + trained  # no trained model: the base is not run for nothing
        cfg = params.double_turn.model_copy(update={"subject_output": subject_output(params, subjects)})
        queries = qa.selected(qa_sets, "eval")
        chat = with_subjects(llm, subjects).session(context)
        out = evaluation.eval_interactions(chat, qa_sets, queries, served, cfg)
        context.add_output_metadata({**chat.usage(), "subjects": dg.MetadataValue.json(served),
                                     "not_served": dg.MetadataValue.json({s.subject: s.missing for s in subjects
                                                                          if s.missing}),
                                     "subject_output": cfg.subject_output, "eval_queries": queries.height,
                                     "episodes": out.height})
        return out

    return double_turn_trained_interactions


def _labels(params: Params, subjects: list[TrainedSubject]) -> pl.DataFrame:
    base = reference_subject(params)
    alone = not any(not s.missing for s in subjects)  # no trained model served: the base was not run either
    rows = [{"subject": base, "model": "Base", "status": "not_served" if alone else "ok",
             "reason": "no trained model could be served (see their rows)" if alone else None}] if base else []
    rows += [{"subject": s.subject, "model": MODELS[s.model.split("/", 1)[1]],
              "status": "not_served" if s.missing else "ok", "reason": s.missing} for s in subjects]
    return pl.DataFrame(rows, schema={"subject": pl.Utf8, "model": pl.Utf8, "status": pl.Utf8, "reason": pl.Utf8})


@asset(ins=upstream("headlines/double_turn_trained_interactions"))
def double_turn_table1(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       double_turn_trained_interactions: pl.DataFrame) -> pl.DataFrame:
    """Table 1 (avg turns, answer-set F1 unambiguous / ambiguous / total per model x system) with Table 4's DA rate
    and accuracy; a model that could not be served keeps one row with its reason."""
    cfg = params.double_turn
    labels = _labels(params, _subjects(params))
    table = answer_set.answer_set_table(double_turn_trained_interactions, cfg.random_repeats, cfg.seed,
                                        cfg.bootstrap_samples, cfg.significance_alpha)
    out = labels.join(table, on="subject", how="left").with_columns(source=pl.lit(
        "headlines/double_turn_trained_interactions"))
    view = out.select("model", "label", "avg_turns", "f1_unambiguous", "f1_ambiguous", "f1_total", "da_accuracy",
                      "n_queries", "n_excluded", "status").with_columns(pl.col(pl.Float64).round(3))
    context.add_output_metadata({"table": dg.MetadataValue.md(markdown_table(view, plain=["avg_turns"]))})
    return out


@asset(ins=upstream("headlines/double_turn_trained_interactions"))
def double_turn_comparisons(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                            double_turn_trained_interactions: pl.DataFrame) -> pl.DataFrame:
    """DPO on double-turn vs single-turn labels (the paper's claim) and each trained model vs the base: answer-set
    F1 of Clarify-or-Direct and DA accuracy on the same queries, n, diff, p, a verdict in words, and the paper's
    published gain beside ours (percentage points; source in the metadata)."""
    cfg, ev = params.double_turn, params.evaluation
    subjects = _subjects(params)
    names = {s.model.split("/", 1)[1]: s.subject for s in subjects}
    pairs = [(names[a], names[b]) for a, b in [HEADLINE_PAIR] if a in names and b in names]
    base = reference_subject(params)
    pairs += [(s, base) for s in names.values() if base]
    unfair = {s.subject: unfair_reference(params, s) for s in subjects if not s.missing}
    out = comparisons(double_turn_trained_interactions, pairs, COMPARED_SYSTEM, cfg.bootstrap_samples, cfg.seed)
    headline = (names.get(HEADLINE_PAIR[0]), names.get(HEADLINE_PAIR[1]))
    words = [f"refused: {unfair[r['subject']]}" if r["reference"] == base and unfair.get(r["subject"]) else
             verdict(r["n_paired"], r["diff"], r["p_value"], cfg.significance_alpha, ev.min_n_significance, "queries")
             for r in out.iter_rows(named=True)]
    is_headline = pl.col("subject").eq_missing(pl.lit(headline[0], pl.Utf8)) & pl.col("reference").eq_missing(
        pl.lit(headline[1], pl.Utf8)) & pl.lit(None not in headline)
    out = out.with_columns(
        verdict=pl.Series(words, dtype=pl.Utf8),
        our_gain_points=pl.col("diff") * 100,
        published_gain_points=pl.when(is_headline).then(
            pl.col("metric").replace_strict(DOUBLE_TURN_GAINS, default=None)).otherwise(None).cast(pl.Float64),
        published_source=pl.when(is_headline).then(pl.lit(DOUBLE_TURN_SOURCE)).otherwise(None))
    context.add_output_metadata({
        "table": dg.MetadataValue.md(markdown_table(out.select(
            "subject", "reference", "metric", "n_paired", "n_errors", "our_gain_points", "published_gain_points",
            "p_value", "verdict"), plain=["our_gain_points", "published_gain_points", "p_value"])),
        "published_source": DOUBLE_TURN_SOURCE,
        **{f"verdict/{r['subject']}_vs_{r['reference']}_{r['metric']}": r["verdict"]
           for r in out.iter_rows(named=True)}})
    return out
