"""Group `intents`: intent classification with clarification (seed: "Scaling Intent Understanding").

catalogue + tagged utterances -> ambiguous queries (edit + verification, intent pairs) -> simulated assistant/user
conversations -> turn scores (ARS, quality) and SDRS -> curated training set (top percentile, label-dropout OOD,
TRL JSONL) and, for every subject model, test conversations -> the Table 2 layout + OOD accuracy.
"""

import time
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.config import IntentsConfig, Params
from dagster_project.core.intents import ambiguous, curation, evaluation
from dagster_project.core.intents.assistant import load_few_shot
from dagster_project.core.intents.catalog import Catalog, validate_catalog
from dagster_project.core.intents.evaluation import eval_markdown, intent_eval_table
from dagster_project.core.intents.scoring import conversation_table, score_conversations
from dagster_project.core.intents.simulation import (
    USER_ROLE,
    simulate_conversations,
    training_seeds,
)
from dagster_project.core.intents.utterances import validate_utterances
from dagster_project.io.formats.intents import (
    read_ambiguous,
    read_catalog,
    read_few_shot,
    read_utterances,
)
from dagster_project.io.writers import write_jsonl_atomic
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "intents"
EXPORT = Path(ASSETS_DIR) / GROUP / "exports" / "training_conversations.jsonl"
asset = group_asset(GROUP)


def _demos(cfg: IntentsConfig, catalog: Catalog) -> tuple[list, list[str]]:
    return load_few_shot(read_few_shot(cfg.few_shot), catalog.names) if cfg.few_shot else ([], [])


def _counts(df: pl.DataFrame, column: str) -> dg.MetadataValue:
    return dg.MetadataValue.json({str(k): int(n) for k, n in df.group_by(column).len().iter_rows()})


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


@asset
def intent_catalog(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]) -> pl.DataFrame:
    """The intents (name, description, examples) from `intents.catalog`; bad records stay with kept=false."""
    cfg = params.intents
    out = validate_catalog(read_catalog(cfg.catalog), cfg.catalog, cfg.ood_label)
    context.add_output_metadata({"intents": int(out["kept"].sum()), "rejected": int((~out["kept"]).sum()),
                                 "source": cfg.catalog})
    return out


@dg.multi_asset(
    group_name=GROUP, ins=upstream("intents/intent_catalog"),
    outs={"intent_utterances": dg.AssetOut(key=[GROUP, "intent_utterances"], kinds={"polars"}),
          "intent_utterances_rejected": dg.AssetOut(key=[GROUP, "intent_utterances_rejected"], kinds={"polars"})})
def intent_utterances(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      intent_catalog: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Tagged utterances (text, intent, split, is_ood) and, beside them, the quarantine of refused records."""
    cfg = params.intents
    records = read_utterances(cfg.dataset)
    kept, rejected = validate_utterances(records, cfg.dataset, Catalog.from_frame(intent_catalog).names, cfg)
    kept = kept.with_columns(file_records=pl.lit(len(records)))
    counts = {f"{s}": int(n) for s, n in kept.group_by("split").len().iter_rows()}
    # `val` rows are kept and counted but feed no asset: nothing is fine-tuned here, so there is no model selection
    context.add_output_metadata({"records": len(records), "kept": kept.height, "rejected": len(rejected),
                                 "ood": int(kept["is_ood"].sum()), **{f"split_{k}": v for k, v in counts.items()},
                                 "val_rows_unused": counts.get("val", 0)}, output_name="intent_utterances")
    context.add_output_metadata({"reasons": dg.MetadataValue.json(dict(rejected.reasons()))},
                                output_name="intent_utterances_rejected")
    return kept, rejected.frame()


@asset(ins=upstream("intents/intent_catalog", "intents/intent_utterances"))
def ambiguous_queries(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      llm: dg.ResourceParam[LLMResource], intent_catalog: pl.DataFrame,
                      intent_utterances: pl.DataFrame) -> pl.DataFrame:
    """Ambiguous queries by both methods (`method`: edit | intent_pair), plus any the user provides (`provided`),
    each with its unambiguous counterpart and true intent. Edits need the verifier's confirmation; every refused
    row stays with kept=false and why."""
    t0 = time.monotonic()
    cfg = params.intents
    chat = llm.session(context)
    provided = read_ambiguous(cfg.ambiguous_dataset) if cfg.ambiguous_dataset else None
    out = ambiguous.ambiguous_queries(chat, Catalog.from_frame(intent_catalog), intent_utterances, cfg,
                                      params.llm.role("generator").seed, provided)
    kept = out.filter(pl.col("kept"))
    plan = ambiguous.pair_plan(Catalog.from_frame(intent_catalog).names, cfg)
    context.add_output_metadata({
        **chat.usage(), "rows": out.height, "kept": kept.height, "intent_pairs": plan.height,
        "pair_coverage": plan["coverage"].first() if plan.height else "none",
        "kept_by_method_split": dg.MetadataValue.json(
            {f"{m}/{s}": int(n) for m, s, n in kept.group_by(["method", "split"]).len().sort(["method", "split"])
             .iter_rows()}),
        "reject_reasons": _counts(out.filter(~pl.col("kept")), "reject_reason"),
        "seconds": round(time.monotonic() - t0, 1)})
    return out


@asset(ins=upstream("intents/intent_catalog", "intents/intent_utterances", "intents/ambiguous_queries"))
def simulated_conversations(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                            llm: dg.ResourceParam[LLMResource], intent_catalog: pl.DataFrame,
                            intent_utterances: pl.DataFrame, ambiguous_queries: pl.DataFrame) -> pl.DataFrame:
    """Training-split conversations, one row per message: the `assistant` role predicts an intent, asks, or says
    out of domain; the `user_simulator` answers from the unambiguous query. At most `max_turns` assistant turns.
    Unambiguous utterances are single-turn conversations (Appendix C: query, then the predicted intent): their
    limit is one turn, so an assistant that asks on a clear utterance ends at max_turns (SDRS 0, never trained on)."""
    t0 = time.monotonic()
    cfg = params.intents
    catalog = Catalog.from_frame(intent_catalog)
    demos, skipped = _demos(cfg, catalog)
    seeds = training_seeds(catalog, intent_utterances, ambiguous_queries, cfg)
    chat = llm.session(context)
    out = simulate_conversations(seeds, chat, catalog, demos, cfg, "assistant", params.llm.role(USER_ROLE).seed)
    conv = out.group_by("conversation_id").agg(pl.col("outcome").first(), pl.col("llm_calls").first(),
                                               pl.col("n_assistant_turns").first())
    context.add_output_metadata({
        **chat.usage(), "conversations": len(seeds), "messages": out.height, "outcomes": _counts(conv, "outcome"),
        "calls_per_conversation": round(float(conv["llm_calls"].mean() or 0), 2),
        "mean_assistant_turns": round(float(conv["n_assistant_turns"].mean() or 0), 2),
        "few_shot_demos": len(demos), "few_shot_skipped": dg.MetadataValue.json(skipped),
        "seconds": round(time.monotonic() - t0, 1)})
    return out.with_columns(source=pl.lit("simulated"))


@asset(ins=upstream("intents/intent_catalog", "intents/simulated_conversations"))
def conversation_scores(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], intent_catalog: pl.DataFrame,
                        simulated_conversations: pl.DataFrame) -> pl.DataFrame:
    """Per assistant turn: enough information (judge), ARS, and for clarifying turns the five quality ratings;
    per conversation (repeated on its turns): A, R and SDRS."""
    t0 = time.monotonic()
    chat = llm.session(context)
    out = score_conversations(simulated_conversations, chat, Catalog.from_frame(intent_catalog), params.intents)
    conv = conversation_table(out)
    context.add_output_metadata({
        **chat.usage(), "turns": out.height, "conversations": conv.height,
        "n_scored": int(conv["sdrs"].is_not_null().sum()),
        "n_judge_failed": int(conv["score_status"].str.starts_with("judge_").sum()),
        "mean_sdrs": _round(conv["sdrs"].mean()), "mean_ars": _round(out["ars"].mean()),
        "score_status": _counts(conv, "score_status"), "sdrs_distribution": dg.MetadataValue.md(_sdrs_histogram(conv)),
        "seconds": round(time.monotonic() - t0, 1)})
    return out


@asset(ins=upstream("intents/intent_catalog", "intents/simulated_conversations", "intents/conversation_scores"))
def training_conversations(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                           intent_catalog: pl.DataFrame, simulated_conversations: pl.DataFrame,
                           conversation_scores: pl.DataFrame) -> pl.DataFrame:
    """The curated instruction-tuning set: top `keep_percentile` % by SDRS (cut and removals recorded), plus
    `n_label_dropout` added label-dropout OOD examples, TRL `messages`; kept rows exported to assets/intents/exports/training_conversations.jsonl."""
    cfg = params.intents
    catalog = Catalog.from_frame(intent_catalog)
    demos, _ = _demos(cfg, catalog)
    conv = conversation_table(conversation_scores)
    out = curation.training_conversations(simulated_conversations, conv, catalog, demos, cfg)
    lines = write_jsonl_atomic(curation.trl_rows(out), EXPORT)
    cuts = out["cut_sdrs"].drop_nulls()
    context.add_output_metadata({
        "rows": out.height, "in_domain": int((~out["label_dropout"]).sum()), "kept": int(out["kept"].sum()),
        "label_dropout_added": int(out["label_dropout"].sum()),
        "cut_sdrs": _round(cuts.first() if cuts.len() else None),
        "removed": _counts(out.filter(~pl.col("kept")), "removed_reason"),
        "export": dg.MetadataValue.path(str(EXPORT)), "export_lines": lines})
    return out


@asset(ins=upstream("intents/conversation_scores"))
def keep_percentile_sweep(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                          conversation_scores: pl.DataFrame) -> pl.DataFrame:
    """Table 4 layout on the generated data: conversations kept and their mean SDRS at each top percentile."""
    conv = conversation_table(conversation_scores)
    out = curation.keep_percentile_sweep(conv, params.intents.sweep_percentiles).with_columns(
        source=pl.lit("intents/conversation_scores"))
    context.add_output_metadata({"table": dg.MetadataValue.md(eval_markdown(out))})
    return out


@asset(ins=upstream("intents/intent_catalog", "intents/intent_utterances", "intents/ambiguous_queries"))
def eval_conversations(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                       llm: dg.ResourceParam[LLMResource], intent_catalog: pl.DataFrame,
                       intent_utterances: pl.DataFrame, ambiguous_queries: pl.DataFrame) -> pl.DataFrame:
    """Held-out test conversations for every subject model (the subject plays the assistant), one row per message,
    with the judge's scores on assistant rows: ambiguous and unambiguous test queries, user-provided OOD utterances
    and label-dropout OOD. Every kind runs under the same `max_turns`: a subject may ask before it says out of
    domain (the user simulator answers from the utterance itself); OOD conversations are not judged."""
    t0 = time.monotonic()
    cfg = params.intents
    catalog = Catalog.from_frame(intent_catalog)
    demos, _ = _demos(cfg, catalog)
    chat = llm.session(context)
    out = evaluation.eval_conversations(chat, catalog, demos, intent_utterances, ambiguous_queries, cfg,
                                        cfg.subjects or params.untrained_subjects(), params.llm.role(USER_ROLE).seed)
    out = out.with_columns(source=pl.lit("simulated"))
    context.add_output_metadata({**chat.usage(), "messages": out.height,
                                 "conversations": out["conversation_id"].n_unique(),
                                 "seconds": round(time.monotonic() - t0, 1)})
    return out


@asset(ins=upstream("intents/eval_conversations"))
def intent_eval(context: dg.AssetExecutionContext, eval_conversations: pl.DataFrame) -> pl.DataFrame:
    """Table 2 layout per subject: IC accuracy (unambiguous), mean SDRS, ARS, Rel, Con, RA, Fac, Pol; plus OOD
    accuracy (user-provided and label-dropout), accuracy on ambiguous queries and counts."""
    scores = eval_conversations.filter(pl.col("speaker") == "assistant")
    models = scores.group_by("subject").agg(
        model=pl.col("model").drop_nulls().unique().sort().str.join(","),
        prompt_version=pl.col("prompt_version").drop_nulls().unique().sort().str.join(","))
    out = intent_eval_table(eval_conversations, scores).join(models, on="subject", how="left").with_columns(
        source=pl.lit("intents/eval_conversations"))
    context.add_output_metadata({"table": dg.MetadataValue.md(eval_markdown(out))})
    return out


def _sdrs_histogram(conv: pl.DataFrame) -> str:
    """SDRS counts in five bins (0 exactly, then quarters) as a small Markdown table."""
    s = conv["sdrs"].drop_nulls()
    bins = [("0", s.filter(s == 0).len()), ("(0, 0.25]", s.filter((s > 0) & (s <= 0.25)).len()),
            ("(0.25, 0.5]", s.filter((s > 0.25) & (s <= 0.5)).len()),
            ("(0.5, 0.75]", s.filter((s > 0.5) & (s <= 0.75)).len()), ("(0.75, 1]", s.filter(s > 0.75).len()),
            ("no score", conv["sdrs"].null_count())]
    return "| SDRS | conversations |\n|---|---|\n" + "\n".join(f"| {b} | {n} |" for b, n in bins)
