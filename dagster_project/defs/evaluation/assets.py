"""Group `evaluation`: methods x subject models on every dialogue turn, LLM judge, metric tables and the report.

`predictions` is partitioned by subject x method (both lists come from params.yaml: llm.subjects and
evaluation.methods), so a new model or method materializes only its own partitions. Everything else
reads all partitions.
"""

import json
import time
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from dagster_project.config import BENCHMARK_DATASET, Params
from dagster_project.core.clarifymt.agent.predictions import (
    EVALUATED,
    evaluation_dialogues,
    predict_turns,
    prediction_stats,
    sampled_dialogues,
)
from dagster_project.core.clarifymt.agent.registry import build_method
from dagster_project.core.clarifymt.external import TURN_SCHEMA, import_dataset
from dagster_project.core.clarifymt.judge import judge_scores as score_questions
from dagster_project.core.clarifymt.judge import pairwise_judgements as judge_pairs
from dagster_project.core.clarifymt.metrics import evaluation_tables
from dagster_project.core.clarifymt.metrics import method_comparison as compare_methods
from dagster_project.core.clarifymt.report import (
    ReportInputs,
    question_quality,
    write_report,
)
from dagster_project.core.shared.metrics import bertscore_f1
from dagster_project.core.shared.tables import markdown_table
from dagster_project.io.records import InputFileError, Quarantine
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.embedder import minilm_path
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.lib.vector_cache import VectorCache
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset

GROUP = "evaluation"
asset = group_asset(GROUP)
DIALOGUE_INS = upstream("benchmark/persona_dialogues", "evaluation/external_dialogues")


def partitions_for(params: Params) -> dg.MultiPartitionsDefinition:
    """subject (llm.subjects) x method (evaluation.methods)."""
    return dg.MultiPartitionsDefinition({
        "subject": dg.StaticPartitionsDefinition(list(params.llm.subjects)),
        "method": dg.StaticPartitionsDefinition(list(params.evaluation.methods)),
    })


def _messages(params: Params, persona_dialogues: pl.DataFrame, external_dialogues: pl.DataFrame) -> pl.DataFrame:
    turns = evaluation_dialogues(params.evaluation, persona_dialogues, external_dialogues)
    return turns.select("dataset", "dialogue_id", "turn", "messages")


@dg.multi_asset(
    group_name=GROUP, can_subset=False,
    outs={"external_dialogues": dg.AssetOut(key=[GROUP, "external_dialogues"], kinds={"polars"}),
          "external_dialogues_rejected": dg.AssetOut(key=[GROUP, "external_dialogues_rejected"], kinds={"polars"})},
)
def external_dialogues(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]):
    """Public clarification datasets (CLAMBER, ClariQ, generic JSONL/CSV) in the benchmark's turn schema.

    Only datasets named in evaluation.datasets are read. Malformed records go to
    `external_dialogues_rejected` with file, record number, field and reason.
    """
    turns, rejected, meta = [pl.DataFrame(schema=TURN_SCHEMA)], Quarantine(), {}
    for name in params.evaluation.datasets:
        if name == BENCHMARK_DATASET:
            continue
        ds = params.evaluation.external[name]
        try:
            res = import_dataset(name, ds.format, ds.path, ds.limit, ds.clariq_clarify_from, ds.max_field_chars)
        except InputFileError as err:
            raise dg.Failure(description=f"evaluation.external.{name}: {err}") from None
        turns.append(res.turns)
        rejected.rows.extend(res.rejected.rows)
        meta |= {f"{name}/{k}": v for k, v in res.summary().items()}
    t = pl.concat(turns)
    context.add_output_metadata(meta | {"turns": t.height}, output_name="external_dialogues")
    context.add_output_metadata({"rejected": len(rejected)}, output_name="external_dialogues_rejected")
    return t, rejected.frame()


def build(params: Params) -> dg.Definitions:
    """The group's assets; the predictions partitions come from `params` (subjects x methods)."""

    @asset(partitions_def=partitions_for(params), ins=DIALOGUE_INS)
    def predictions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                    llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource, persona_dialogues: pl.DataFrame,
                    external_dialogues: pl.DataFrame) -> pl.DataFrame:
        """One row per (subject, method, dialogue turn): decision, question/answer, trace, LLM calls, status."""
        keys = context.partition_key.keys_by_dimension
        subject, method_name = keys["subject"], keys["method"]
        if subject not in params.llm.subjects:
            raise dg.Failure(description=f"subject {subject!r} is not in params.yaml llm.subjects "
                                         f"{sorted(params.llm.subjects)}: reload the code location")
        turns = evaluation_dialogues(params.evaluation, persona_dialogues, external_dialogues)
        chosen = sampled_dialogues(params.evaluation, turns)
        selected = turns.join(chosen, on=["dataset", "dialogue_id"], how="semi")
        method = build_method(method_name, params.evaluation, role=f"subject:{subject}")
        chat = llm.session(context)
        started = time.monotonic()
        out = predict_turns(method, subject, selected, chat, embedder.encode)
        context.add_output_metadata({
            **chat.usage(), **prediction_stats(out), "dialogues": chosen.height,
            "dialogues_available": turns["dialogue_id"].n_unique(),
            "llm_calls_per_turn_max": method.calls_per_turn, "seconds": round(time.monotonic() - started, 1),
        })
        return out

    return dg.Definitions(assets=[external_dialogues, predictions, judge_scores, pairwise_judgements,
                                  metric_tables, method_comparison, report])


JUDGE_INS = {**upstream("evaluation/predictions"), **DIALOGUE_INS}


@asset(ins=JUDGE_INS)
def judge_scores(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                 llm: dg.ResourceParam[LLMResource], predictions: pl.DataFrame, persona_dialogues: pl.DataFrame,
                 external_dialogues: pl.DataFrame) -> pl.DataFrame:
    """Generated clarifying questions vs the reference: LLM judge 0-5 on a per-subtype sample,
    token-F1 and BERTScore-F1 on every clarify turn where the method asked."""
    cfg = params.evaluation
    chat = llm.session(context)

    cache = VectorCache(params.embedder.cache_path) if params.embedder.cache_path else None

    def bertscore(candidates: list[str], references: list[str]) -> list[float]:
        """BERTScore-F1 per pair; pairs a run already scored come from the vector cache."""
        if cache is None or not candidates:
            return bertscore_f1(candidates, references, minilm_path(), cfg.bertscore_layers)

        def score(pairs: list[str]) -> np.ndarray:
            c, r = zip(*map(json.loads, pairs), strict=True)
            return np.asarray(bertscore_f1(list(c), list(r), minilm_path(), cfg.bertscore_layers))

        pairs = [json.dumps([c, r]) for c, r in zip(candidates, references, strict=True)]
        return [float(x) for x in cache.rows(f"bertscore:{cfg.bertscore_layers}", pairs, score)[:, 0]]

    out = score_questions(chat, predictions, _messages(params, persona_dialogues, external_dialogues), cfg,
                          params.llm.role("judge").model, bertscore if cfg.bertscore else None)
    sampled = out.filter(pl.col("sampled"))
    context.add_output_metadata({
        **chat.usage(), "candidate_turns": out.height,
        "sampled_items": sampled.select("dataset", "dialogue_id", "turn").n_unique() if sampled.height else 0,
        "judged_by_llm": int((out["judged_by"] == "judge").sum()),
        "scored_zero_by_rule": int((out["judged_by"] == "rule").sum()),
        "judge_parse_errors": int((out["status"] == "parse_error").sum()), "bertscore": cfg.bertscore,
    })
    return out


@asset(ins=JUDGE_INS)
def pairwise_judgements(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], predictions: pl.DataFrame,
                        persona_dialogues: pl.DataFrame, external_dialogues: pl.DataFrame) -> pl.DataFrame:
    """Win / tie / lose between two methods (evaluation.judge_pairs): their whole replies without a reference
    (pairwise_mode: output, as ClariLM) or their questions against the reference (reference_question), judged
    twice with the positions swapped: a win must hold in both orders."""
    chat = llm.session(context)
    out = judge_pairs(chat, predictions, _messages(params, persona_dialogues, external_dialogues), params.evaluation,
                      params.llm.role("judge").model)
    context.add_output_metadata({
        **chat.usage(), "mode": params.evaluation.pairwise_mode, "pairs": out.height,
        "judged_by_llm": int((out["judged_by"] == "judge").sum()),
        "outcomes": dg.MetadataValue.json(dict(out.group_by("outcome").len().iter_rows()) if out.height else {})})
    return out


@asset(ins=upstream("evaluation/predictions"))
def metric_tables(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                  predictions: pl.DataFrame) -> pl.DataFrame:
    """Accuracy (n, 95% CI), under-/over-clarification, invalid / not-a-question shares, protocol compliance,
    question share and error counts (a method whose rows all failed stays with n = 0): overall, by turn, persona, subtype,
    subtype x turn (Table 4) and persona x turn (Table 5 at turn 2), per dataset x subject x method."""
    evaluated = predictions.filter(pl.col("status").is_in(EVALUATED))
    out = evaluation_tables(predictions, params.evaluation.clarify_must_be_question)
    overall = out.filter(pl.col("breakdown") == "overall")
    context.add_output_metadata({
        "evaluated_turns": evaluated.height, "excluded_turns": predictions.height - evaluated.height,
        "overall": dg.MetadataValue.md(markdown_table(overall.drop("persona", "subtype", "turn"))),
    })
    return out


@asset(ins=upstream("evaluation/predictions", "evaluation/judge_scores"))
def method_comparison(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], predictions: pl.DataFrame,
                      judge_scores: pl.DataFrame) -> pl.DataFrame:
    """Methods side by side per backbone (Tables 5/6): per-persona accuracy at the comparison turn and
    over all turns, Avg./Std., macro-F1, calls per turn, paired tests vs ClarifyAgent, question quality."""
    cfg = params.evaluation
    out = compare_methods(predictions, cfg.agent_method, cfg.comparison_turn, cfg.significance_alpha,
                          question_quality(judge_scores), cfg.min_n_significance, cfg.ttest_min_n,
                          cfg.clarify_must_be_question)
    if out.is_empty():
        return out
    table = out.filter(pl.col("scope") == f"turn_{cfg.comparison_turn}").select(
        "dataset", "subject", "method", "n", "accuracy", "accuracy_ci_low", "accuracy_ci_high",
        "protocol_compliance", "question_share", "llm_errors", "persona_avg", "persona_std", "calls_per_turn")
    context.add_output_metadata({"rows": out.height, "comparison": dg.MetadataValue.md(markdown_table(table))})
    return out


@asset(ins=upstream("evaluation/metric_tables", "evaluation/method_comparison", "evaluation/judge_scores",
                    "evaluation/pairwise_judgements", "evaluation/predictions"),
       deps=[dg.AssetKey(["benchmark", "annotation_agreement"])])
def report(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], metric_tables: pl.DataFrame,
           method_comparison: pl.DataFrame, judge_scores: pl.DataFrame, pairwise_judgements: pl.DataFrame,
           predictions: pl.DataFrame) -> pl.DataFrame:
    """report.md + a self-contained report.html (plots inlined) + the plots as PNG, under
    assets/evaluation/report/; it includes the benchmark's validation round when that was built."""
    cfg = params.evaluation
    validation = read_asset(ASSETS_DIR, "benchmark", "annotation_agreement")
    inputs = ReportInputs(metric_tables, method_comparison, judge_scores, pairwise_judgements, predictions,
                          cfg.comparison_turn, cfg.agent_method, cfg.max_dialogues, cfg.sample_seed, validation)
    folder = Path(ASSETS_DIR) / GROUP / "report"
    files, text = write_report(inputs, folder)
    context.add_output_metadata({"report": dg.MetadataValue.path(str(folder / "report.html")),
                                 "preview": dg.MetadataValue.md(text)})
    return pl.DataFrame({"file": [str(f) for f in files], "bytes": [f.stat().st_size for f in files]})
