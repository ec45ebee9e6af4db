"""Intents Tables 2, 4 and 7 with the tuned classifier: training/intents_tuned (and each sweep percentile model)
and the untuned base play the assistant on the intents group's test conversations in the template the model was
trained on; the table puts them beside the prompted subjects of intents/intent_eval and the paper's numbers."""


import dataclasses
import time
from typing import Any

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.intents import evaluation
from dagster_project.core.intents.assistant import load_few_shot
from dagster_project.core.intents.catalog import Catalog
from dagster_project.core.intents.evaluation import eval_markdown, intent_eval_table
from dagster_project.core.intents.headline import headline_table, paired_comparisons
from dagster_project.core.intents.simulation import USER_ROLE
from dagster_project.core.shared.tables import markdown_table
from dagster_project.core.training.sets import percentile_tag
from dagster_project.core.training.template import intents_template
from dagster_project.defs.headlines.common import (
    GROUP,
    TrainedSubject,
    reference_subject,
    trained_subjects,
    unfair_reference,
    with_subjects,
)
from dagster_project.defs.headlines.published import INTENTS, INTENTS_SOURCE, verdict
from dagster_project.io.formats.intents import read_few_shot
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import LLMResource

asset = group_asset(GROUP)
VERDICT_METRICS = ("ic_accuracy", "ood_dropout_accuracy")  # Table 2's headline and Table 7's


def _percentile(params: Params, subject: TrainedSubject) -> float:
    name = subject.model.split("/", 1)[1]
    for p in params.intents.sweep_percentiles:
        if name == f"intents_tuned_{percentile_tag(p)}":
            return float(p)
    return float(params.intents.keep_percentile)


def _check_template(t: TrainedSubject) -> TrainedSubject:
    """A tuned model is served only when it learned the prompt this evaluation renders (the plain-text intents
    assistant prompt, core/training/template.intents_template); another recorded template is named as the reason."""
    want = intents_template()
    if t.missing or t.template is None or (t.template.system, t.template.user, t.template.parser) == (
            want.system, want.user, want.parser):
        return t
    why = (f"{t.model}: recorded template {t.template.version} is not the intents assistant prompt this evaluation "
           f"renders ({want.version})")
    return dataclasses.replace(t, missing=why)


def _systems(params: Params, intents_tuned: pl.DataFrame) -> tuple[list[TrainedSubject], dict[str, dict[str, Any]]]:
    """The trained-side subjects (untuned base first, then each tuned model) and their row labels."""
    tuned = [_check_template(t) for t in trained_subjects(params, intents_tuned)]
    template = f"trained template {intents_template().version} (plain text)"
    systems: dict[str, dict[str, Any]] = {}
    base = reference_subject(params)
    if base:
        systems[base] = {"system": "untuned_base", "percentile": None, "template": template, "status": "ok",
                         "reason": None}
    for t in tuned:
        systems[t.subject] = {"system": "tuned", "percentile": _percentile(params, t), "template": template,
                              "status": "not_served" if t.missing else "ok", "reason": t.missing,
                              "unfair_reference": None if t.missing else unfair_reference(params, t)}
    if base and not any(not t.missing for t in tuned):  # nothing to compare: the base is not run for nothing
        systems[base] |= {"status": "not_served", "reason": "no tuned model could be served (see the tuned rows)"}
    return tuned, systems


@asset(ins=upstream("intents/intent_catalog", "intents/intent_utterances", "intents/ambiguous_queries",
                    "training/intents_tuned"))
def intents_trained_conversations(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                                  llm: dg.ResourceParam[LLMResource], intent_catalog: pl.DataFrame,
                                  intent_utterances: pl.DataFrame, ambiguous_queries: pl.DataFrame,
                                  intents_tuned: pl.DataFrame) -> pl.DataFrame:
    """The intents test conversations (same seeds and turn limit as intents/eval_conversations) with the untuned
    base (evaluation.trained_baseline) and every servable tuned model as the assistant, prompted in the template
    they were trained on; one row per message with the judge's scores."""
    t0 = time.monotonic()
    cfg = params.intents
    tuned, systems = _systems(params, intents_tuned)
    served = [s for s, v in systems.items() if v["status"] == "ok"]
    trained_cfg = cfg.model_copy(update={"structured_output": False})  # the intents template is plain text
    catalog = Catalog.from_frame(intent_catalog)
    demos = load_few_shot(read_few_shot(cfg.few_shot), catalog.names)[0] if cfg.few_shot else []
    chat = with_subjects(llm, tuned).session(context)
    out = evaluation.eval_conversations(chat, catalog, demos, intent_utterances, ambiguous_queries, trained_cfg,
                                        served, params.llm.role(USER_ROLE).seed)
    context.add_output_metadata({**chat.usage(), "subjects": dg.MetadataValue.json(served),
                                 "not_served": dg.MetadataValue.json({s: v["reason"] for s, v in systems.items()
                                                                      if v["status"] != "ok"}),
                                 "template": intents_template().version, "messages": out.height,
                                 "seconds": round(time.monotonic() - t0, 1)})
    return out.with_columns(source=pl.lit("simulated"))


def _with_verdicts(table: pl.DataFrame, comparisons: pl.DataFrame, alpha: float, min_n: int,
                   unfair: dict[str, str | None]) -> pl.DataFrame:
    """Per tuned row, for IC accuracy and label-dropout OOD accuracy: n paired, diff vs the base, p and a verdict
    (a comparison with an unfair reference is refused in words, naming both models)."""
    for metric in VERDICT_METRICS:
        c = comparisons.filter(pl.col("metric") == metric)
        words = [f"refused: {unfair[r['subject']]}" if unfair.get(r["subject"]) else
                 verdict(r["n_paired"], r["diff"], r["p_value"], alpha, min_n, "test conversations")
                 for r in c.iter_rows(named=True)]
        c = c.select("subject", pl.col("n_paired").alias(f"{metric}_n_paired"),
                     pl.col("n_errors").alias(f"{metric}_n_errors"), pl.col("diff").alias(f"{metric}_diff"),
                     pl.col("p_value").alias(f"{metric}_p")).with_columns(
            pl.Series(f"{metric}_verdict", words, pl.Utf8))
        table = table.join(c, on="subject", how="left")
    return table


@asset(ins=upstream("headlines/intents_trained_conversations", "intents/intent_eval", "training/intents_tuned"))
def intents_headline(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                     intents_trained_conversations: pl.DataFrame, intent_eval: pl.DataFrame,
                     intents_tuned: pl.DataFrame) -> pl.DataFrame:
    """Tables 2/4/7 in one: per subject IC accuracy, SDRS, ARS, the judge means and OOD accuracy (user-provided and
    label dropout), system prompted / untuned_base / tuned (with its training percentile: Table 4), each tuned
    model's paired difference from the base with a verdict in words, and the paper's rows (system `published`)."""
    turns = intents_trained_conversations
    _, systems = _systems(params, intents_tuned)
    trained = intent_eval_table(turns, turns.filter(pl.col("speaker") == "assistant")).with_columns(
        source=pl.lit("headlines/intents_trained_conversations")) if turns.height else pl.DataFrame(
        schema={"subject": pl.Utf8})  # nothing was served: the rows say why
    table = headline_table(intent_eval, trained, systems)
    ev = params.evaluation
    tuned = [s for s, v in systems.items() if v["system"] == "tuned" and v["status"] == "ok"]
    comparisons = paired_comparisons(turns, tuned, reference_subject(params), ev.ttest_min_n)
    unfair = {s: v.get("unfair_reference") for s, v in systems.items()}
    table = _with_verdicts(table, comparisons, ev.significance_alpha, ev.min_n_significance, unfair)
    table = table.with_columns(dataset=pl.lit("ours (intents test split)"))
    published = pl.DataFrame(INTENTS).with_columns(
        pl.col("ic_accuracy") / 100, pl.col("ood_accuracy") / 100, system=pl.lit("published"),
        subject=pl.col("model"), paper_table=pl.col("table")).drop("model", "table")
    out = pl.concat([table, published], how="diagonal_relaxed")
    words = {f"{r['subject']}_{m}": r[f"{m}_verdict"] for r in table.filter(pl.col("system") == "tuned")
             .iter_rows(named=True) for m in VERDICT_METRICS if r.get(f"{m}_verdict")}
    view = table.select([c for c in ("system", "subject", "percentile", "ic_accuracy", "sdrs", "ars",
                                     "ood_accuracy", "ood_dropout_accuracy", "n_unambiguous", "excluded",
                                     "status") if c in table.columns])
    context.add_output_metadata({
        "table": dg.MetadataValue.md(eval_markdown(view)),
        "comparisons": dg.MetadataValue.md(markdown_table(comparisons)),
        "published": dg.MetadataValue.md(markdown_table(published.select(
            "dataset", "subject", "ic_accuracy", "sdrs", "ars", "ood_accuracy"), plain=["sdrs", "ars"])),
        "published_source": INTENTS_SOURCE, **{f"verdict/{k}": v for k, v in words.items()}})
    return out
