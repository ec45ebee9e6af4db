"""Group `intents`: intent classification with clarification (seed: "Scaling Intent Understanding").

catalogue + tagged utterances -> ambiguous queries (edit + verification, intent pairs) -> simulated assistant/user
conversations -> turn scores (ARS, quality) and SDRS -> curated training set (top percentile, label-dropout OOD,
TRL JSONL) and, for every subject model, test conversations -> the Table 2 layout + OOD accuracy.
"""


import time
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core import intents as core
from dagster_project.config import IntentsConfig
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "intents"
EXPORT = Path(ASSETS_DIR) / GROUP / "exports" / "training_conversations.jsonl"


def _key(name: str) -> dg.AssetKey:
    return dg.AssetKey([GROUP, name])


def _log(llm: LLMResource, context: dg.AssetExecutionContext) -> core.CallLog:
    return core.CallLog(lambda role, requests: llm.chat(role, requests, context))


def _usage(llm: LLMResource, log: core.CallLog) -> dict:
    return {f"{role}/{k}": v for role, res in log.results.items() for k, v in llm.usage(role, res).items()}


def _demos(cfg: IntentsConfig, catalog: core.Catalog) -> tuple[list, list[str]]:
    if not cfg.few_shot:
        return [], []
    records, malformed = core.read_records(cfg.few_shot)
    demos, skipped = core.load_few_shot(records, catalog.names)
    return demos, skipped + [f"record {m['_record']}: {m['reason']}" for m in malformed]


def _settings(cfg: IntentsConfig, assistant_role: str, seed: int) -> core.SimulationSettings:
    return core.SimulationSettings(assistant_role, "user_simulator", cfg.structured_output, cfg.assistant_max_tokens,
                                   cfg.user_temperature, seed, cfg.examples_per_intent)


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"})
def intent_catalog(context: dg.AssetExecutionContext, params: ParamsResource) -> pl.DataFrame:
    """The intents (name, description, examples) from `intents.catalog`; bad records stay with kept=false."""
    cfg = params.load().intents
    records, malformed = core.read_records(cfg.catalog)
    out = core.validate_catalog(records, malformed, cfg.catalog, cfg.ood_label)
    context.add_output_metadata({"intents": int(out["kept"].sum()), "rejected": int((~out["kept"]).sum()),
                                 "source": cfg.catalog})
    return out


@dg.multi_asset(
    group_name=GROUP, ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog"))},
    outs={"intent_utterances": dg.AssetOut(key=_key("intent_utterances"), kinds={"polars"}),
          "intent_utterances_rejected": dg.AssetOut(key=_key("intent_utterances_rejected"), kinds={"polars"})})
def intent_utterances(context: dg.AssetExecutionContext, params: ParamsResource,
                      intent_catalog: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Tagged utterances (text, intent, split, is_ood) and, beside them, every record refused with its reason."""
    p = params.load()
    cfg = p.intents
    records, malformed = core.read_records(cfg.dataset)
    names = core.Catalog.from_frame(intent_catalog).names
    kept, rejected = core.validate_utterances(records, malformed, cfg.dataset, names, cfg.ood_label,
                                              cfg.test_fraction, cfg.seed)
    total = len(records) + len(malformed)
    kept = kept.with_columns(file_records=pl.lit(total))
    counts = {f"{s}": int(n) for s, n in kept.group_by("split").len().iter_rows()}
    # `val` rows are kept and counted but feed no asset: nothing is fine-tuned here, so there is no model selection
    context.add_output_metadata({"records": total, "kept": kept.height, "rejected": rejected.height,
                                 "ood": int(kept["is_ood"].sum()), **{f"split_{k}": v for k, v in counts.items()},
                                 "val_rows_unused": counts.get("val", 0)},
                                output_name="intent_utterances")
    context.add_output_metadata({"reasons": dg.MetadataValue.json(
        {r: int(n) for r, n in rejected.group_by("reason").len().iter_rows()})},
        output_name="intent_utterances_rejected")
    return kept, rejected


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog")),
               "intent_utterances": dg.AssetIn(key=_key("intent_utterances"))})
def ambiguous_queries(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      intent_catalog: pl.DataFrame, intent_utterances: pl.DataFrame) -> pl.DataFrame:
    """Ambiguous queries by both methods (`method`: edit | intent_pair), plus any the user provides (`provided`),
    each with its unambiguous counterpart and true intent. Edits need the verifier's confirmation; every refused
    row stays with kept=false and why."""
    t0 = time.monotonic()
    p = params.load()
    cfg = p.intents
    catalog = core.Catalog.from_frame(intent_catalog)
    pool = intent_utterances.filter(~pl.col("is_ood"))
    sources = pl.concat([
        core.round_robin_sample(pool.filter(pl.col("split") == "train"), cfg.n_edit_train, cfg.seed),
        core.round_robin_sample(pool.filter(pl.col("split") == "test"), cfg.n_edit_test, cfg.seed + 1)])
    log = _log(llm, context)
    gen_seed = p.llm.role("generator").seed
    reqs = core.edit_requests(sources, catalog, cfg.examples_per_intent, cfg.generation_temperature, gen_seed)
    edits = core.parse_edits(sources, reqs, log("generator", reqs), catalog.names)
    cands = edits.filter(pl.col("kept"))
    verified = core.apply_verification(cands, log("judge", core.verify_requests(cands, catalog)), catalog.names)
    edits = pl.concat([verified, edits.filter(~pl.col("kept"))], how="diagonal_relaxed")
    pairs = core.sample_intent_pairs(catalog.names, cfg.n_pair_train + cfg.n_pair_test, cfg.seed)
    plan = pl.DataFrame(
        [{"pair_id": f"pair-{'train' if k < cfg.n_pair_train else 'test'}-{k:03d}",
          "split": "train" if k < cfg.n_pair_train else "test", "intent_a": a, "intent_b": b}
         for k, (a, b) in enumerate(pairs)],
        schema={"pair_id": pl.Utf8, "split": pl.Utf8, "intent_a": pl.Utf8, "intent_b": pl.Utf8})
    preqs = core.pair_requests(plan, catalog, cfg.generation_temperature, gen_seed)
    pair_rows = core.parse_pairs(plan, preqs, log("generator", preqs))
    provided = None
    if cfg.ambiguous_dataset:
        records, malformed = core.read_records(cfg.ambiguous_dataset)
        provided = core.validate_provided_ambiguous(records, malformed, catalog.names)
    out = core.combine_ambiguous(edits, pair_rows, provided).with_columns(
        source=pl.when(pl.col("method") == "provided").then(pl.lit(cfg.ambiguous_dataset))
        .otherwise(pl.lit("generated")))
    kept = out.filter(pl.col("kept"))
    context.add_output_metadata({
        **_usage(llm, log), "rows": out.height, "kept": kept.height,
        "kept_by_method_split": dg.MetadataValue.json(
            {f"{m}/{s}": int(n) for m, s, n in kept.group_by(["method", "split"]).len().sort(["method", "split"])
             .iter_rows()}),
        "reject_reasons": dg.MetadataValue.json(
            {r: int(n) for r, n in out.filter(~pl.col("kept")).group_by("reject_reason").len().iter_rows()}),
        "seconds": round(time.monotonic() - t0, 1)})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog")),
               "intent_utterances": dg.AssetIn(key=_key("intent_utterances")),
               "ambiguous_queries": dg.AssetIn(key=_key("ambiguous_queries"))})
def simulated_conversations(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                            intent_catalog: pl.DataFrame, intent_utterances: pl.DataFrame,
                            ambiguous_queries: pl.DataFrame) -> pl.DataFrame:
    """Training-split conversations, one row per message: the `assistant` role predicts an intent, asks, or says
    out of domain; the `user_simulator` answers from the unambiguous query. At most `max_turns` assistant turns.
    Unambiguous utterances are single-turn conversations (Appendix C: query, then the predicted intent): their
    limit is one turn, so an assistant that asks on a clear utterance ends at max_turns (SDRS 0, never trained on)."""
    t0 = time.monotonic()
    p = params.load()
    cfg = p.intents
    catalog = core.Catalog.from_frame(intent_catalog)
    demos, skipped = _demos(cfg, catalog)
    amb = ambiguous_queries.filter(pl.col("kept") & (pl.col("split") == "train"))
    una = core.round_robin_sample(intent_utterances.filter(~pl.col("is_ood") & (pl.col("split") == "train")),
                                  cfg.n_unambiguous_train, cfg.seed + 2)
    seeds = (core.ambiguous_seeds(amb, catalog.names, cfg.max_turns, "train/")
             + core.unambiguous_seeds(una, catalog.names, 1, "train/"))
    log = _log(llm, context)
    out = core.simulate_conversations(seeds, log, catalog, demos,
                                      _settings(cfg, "assistant", p.llm.role("user_simulator").seed))
    conv = out.group_by("conversation_id").agg(pl.col("outcome").first(), pl.col("llm_calls").first(),
                                               pl.col("n_assistant_turns").first())
    context.add_output_metadata({
        **_usage(llm, log), "conversations": len(seeds), "messages": out.height,
        "outcomes": dg.MetadataValue.json({o: int(n) for o, n in conv.group_by("outcome").len().iter_rows()}),
        "calls_per_conversation": round(float(conv["llm_calls"].mean() or 0), 2),
        "mean_assistant_turns": round(float(conv["n_assistant_turns"].mean() or 0), 2),
        "few_shot_demos": len(demos), "few_shot_skipped": dg.MetadataValue.json(skipped),
        "seconds": round(time.monotonic() - t0, 1)})
    return out.with_columns(source=pl.lit("simulated"))


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog")),
               "simulated_conversations": dg.AssetIn(key=_key("simulated_conversations"))})
def conversation_scores(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                        intent_catalog: pl.DataFrame, simulated_conversations: pl.DataFrame) -> pl.DataFrame:
    """Per assistant turn: enough information (judge), ARS, and for clarifying turns the five quality ratings;
    per conversation (repeated on its turns): A, R and SDRS."""
    t0 = time.monotonic()
    cfg = params.load().intents
    log = _log(llm, context)
    out = core.score_conversations(simulated_conversations, log, core.Catalog.from_frame(intent_catalog), cfg.alpha,
                                   cfg.judge_unambiguous)
    conv = core.conversation_table(out)
    context.add_output_metadata({
        **_usage(llm, log), "turns": out.height, "conversations": conv.height,
        "mean_sdrs": _round(conv["sdrs"].mean()), "mean_ars": _round(out["ars"].mean()),
        "score_status": dg.MetadataValue.json({s: int(n) for s, n in conv.group_by("score_status").len().iter_rows()}),
        "sdrs_distribution": dg.MetadataValue.md(_sdrs_histogram(conv)),
        "seconds": round(time.monotonic() - t0, 1)})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog")),
               "simulated_conversations": dg.AssetIn(key=_key("simulated_conversations")),
               "conversation_scores": dg.AssetIn(key=_key("conversation_scores"))})
def training_conversations(context: dg.AssetExecutionContext, params: ParamsResource, intent_catalog: pl.DataFrame,
                           simulated_conversations: pl.DataFrame, conversation_scores: pl.DataFrame) -> pl.DataFrame:
    """The curated instruction-tuning set: top `keep_percentile` % by SDRS (cut and removals recorded), label-dropout
    OOD examples, TRL `messages`; kept rows exported to assets/intents/exports/training_conversations.jsonl."""
    cfg = params.load().intents
    catalog = core.Catalog.from_frame(intent_catalog)
    demos, _ = _demos(cfg, catalog)
    conv = core.conversation_table(conversation_scores)
    out = core.training_conversations(simulated_conversations, conv, catalog, demos, cfg.keep_percentile,
                                      cfg.require_correct, cfg.ood_fraction, cfg.seed, cfg.examples_per_intent)
    EXPORT.parent.mkdir(parents=True, exist_ok=True)
    tmp = EXPORT.with_suffix(".jsonl.tmp")
    tmp.write_text(core.trl_jsonl(out), encoding="utf-8")
    tmp.replace(EXPORT)
    kept = out.filter(pl.col("kept"))
    context.add_output_metadata({
        "conversations": out.height, "kept": kept.height, "label_dropout": int(out["label_dropout"].sum()),
        "cut_sdrs": _round(out["cut_sdrs"].drop_nulls().first() if out["cut_sdrs"].drop_nulls().len() else None),
        "removed": dg.MetadataValue.json(
            {r: int(n) for r, n in out.filter(~pl.col("kept")).group_by("removed_reason").len().iter_rows()}),
        "export": dg.MetadataValue.path(str(EXPORT)), "export_lines": kept.height})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"conversation_scores": dg.AssetIn(key=_key("conversation_scores"))})
def keep_percentile_sweep(context: dg.AssetExecutionContext, params: ParamsResource,
                          conversation_scores: pl.DataFrame) -> pl.DataFrame:
    """Table 4 layout on the generated data: conversations kept and their mean SDRS at each top percentile."""
    cfg = params.load().intents
    out = core.keep_percentile_sweep(core.conversation_table(conversation_scores), cfg.sweep_percentiles)
    out = out.with_columns(source=pl.lit("intents/conversation_scores"))
    context.add_output_metadata({"table": dg.MetadataValue.md(core.markdown(out))})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"intent_catalog": dg.AssetIn(key=_key("intent_catalog")),
               "intent_utterances": dg.AssetIn(key=_key("intent_utterances")),
               "ambiguous_queries": dg.AssetIn(key=_key("ambiguous_queries"))})
def eval_conversations(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                       intent_catalog: pl.DataFrame, intent_utterances: pl.DataFrame,
                       ambiguous_queries: pl.DataFrame) -> pl.DataFrame:
    """Held-out test conversations for every subject model (the subject plays the assistant), one row per message,
    with the judge's scores on assistant rows: ambiguous and unambiguous test queries, user-provided OOD utterances
    and label-dropout OOD. Every kind runs under the same `max_turns`: a subject may ask before it says out of
    domain (the user simulator answers from the utterance itself); OOD conversations are not judged."""
    t0 = time.monotonic()
    p = params.load()
    cfg = p.intents
    catalog = core.Catalog.from_frame(intent_catalog)
    demos, _ = _demos(cfg, catalog)
    names = catalog.names
    test = intent_utterances.filter(~pl.col("is_ood") & (pl.col("split") == "test"))
    amb = ambiguous_queries.filter(pl.col("kept") & (pl.col("split") == "test"))
    una = core.round_robin_sample(test, cfg.n_test_unambiguous, cfg.seed + 3)
    ood = core.round_robin_sample(intent_utterances.filter(pl.col("is_ood")), cfg.n_test_ood, cfg.seed + 4)
    drop = core.round_robin_sample(test, cfg.n_test_dropout, cfg.seed + 5)
    log = _log(llm, context)
    frames = []
    score_cols = ["conversation_id", "assistant_turn", "enough_info", "info_source", "ars", "relevance", "conciseness",
                  "repetition_avoidance", "factuality", "politeness", "quality", "A", "R", "sdrs", "score_status",
                  "score_error", "judge_calls", "info_raw_output", "quality_raw_output"]
    for subject in p.llm.subjects:
        prefix = f"{subject}/test/"
        seeds = (core.ambiguous_seeds(amb, names, cfg.max_turns, prefix)
                 + core.unambiguous_seeds(una, names, cfg.max_turns, prefix)
                 + core.unambiguous_seeds(ood, names, cfg.max_turns, prefix, kind="ood")
                 + core.unambiguous_seeds(drop, names, cfg.max_turns, prefix, kind="ood_dropout"))
        turns = core.simulate_conversations(seeds, log, catalog, demos,
                                            _settings(cfg, f"subject:{subject}", p.llm.role("user_simulator").seed))
        scores = core.score_conversations(turns.filter(pl.col("kind").is_in(["ambiguous", "unambiguous"])), log,
                                          catalog, cfg.alpha, cfg.judge_unambiguous)
        scores = scores.select(score_cols).rename({"info_raw_output": "judge_info_raw",
                                                   "quality_raw_output": "judge_quality_raw"})
        frames.append(turns.join(scores, on=["conversation_id", "assistant_turn"], how="left")
                      .with_columns(subject=pl.lit(subject)))
    out = pl.concat(frames, how="diagonal_relaxed") if frames else core.empty_turns()
    out = out.select("subject", *[c for c in out.columns if c != "subject"]).with_columns(source=pl.lit("simulated"))
    context.add_output_metadata({**_usage(llm, log), "messages": out.height,
                                 "conversations": out["conversation_id"].n_unique(),
                                 "seconds": round(time.monotonic() - t0, 1)})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"eval_conversations": dg.AssetIn(key=_key("eval_conversations"))})
def intent_eval(context: dg.AssetExecutionContext, eval_conversations: pl.DataFrame) -> pl.DataFrame:
    """Table 2 layout per subject: IC accuracy (unambiguous), mean SDRS, ARS, Rel, Con, RA, Fac, Pol; plus OOD
    accuracy (user-provided and label-dropout), accuracy on ambiguous queries and counts."""
    scores = eval_conversations.filter(pl.col("speaker") == "assistant")
    models = scores.group_by("subject").agg(
        model=pl.col("model").drop_nulls().unique().sort().str.join(","),
        prompt_version=pl.col("prompt_version").drop_nulls().unique().sort().str.join(","))
    out = core.intent_eval_table(eval_conversations, scores).join(models, on="subject", how="left").with_columns(
        source=pl.lit("intents/eval_conversations"))
    context.add_output_metadata({"table": dg.MetadataValue.md(core.markdown(out))})
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _sdrs_histogram(conv: pl.DataFrame) -> str:
    """SDRS counts in five bins (0 exactly, then quarters) as a small Markdown table."""
    s = conv["sdrs"].drop_nulls()
    bins = [("0", s.filter(s == 0).len()), ("(0, 0.25]", s.filter((s > 0) & (s <= 0.25)).len()),
            ("(0.25, 0.5]", s.filter((s > 0.25) & (s <= 0.5)).len()),
            ("(0.5, 0.75]", s.filter((s > 0.5) & (s <= 0.75)).len()), ("(0.75, 1]", s.filter(s > 0.75).len()),
            ("no score", conv["sdrs"].null_count())]
    return "| SDRS | conversations |\n|---|---|\n" + "\n".join(f"| {b} | {n} |" for b, n in bins)
