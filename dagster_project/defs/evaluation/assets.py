"""Group `evaluation`: methods x subject models on every dialogue turn, LLM judge, metric tables and the report.

`predictions` is partitioned by subject x method (both lists come from params.yaml: llm.subjects and
evaluation.methods), so a new model or method materializes only its own partitions. Everything else
reads all partitions.
"""

import time
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core.clarifymt.agent.method import (
    MethodSettings, predictions_frame, sample_dialogues, turns_from_frame,
)
from dagster_project.core.clarifymt.agent.registry import build_method, calls_per_turn
from dagster_project.config import BENCHMARK_DATASET, Params
from dagster_project.core.clarifymt.external import REJECTED_SCHEMA, TURN_SCHEMA, ExternalDataError, import_dataset
from dagster_project.core.clarifymt.judge import (
    asked_expr, candidate_turns, pairwise_outcome, pairwise_requests, parse_score, parse_verdict,
    pointwise_requests, rule_outcome, sample_items,
)
from dagster_project.core.shared.metrics import bertscore_f1, token_f1
from dagster_project.core.clarifymt.metrics import evaluation_tables, method_comparison as compare_methods
from dagster_project.core.shared.tables import markdown_table
from dagster_project.core.clarifymt.report import ReportInputs, question_quality, render_report, \
    render_html, report_plots
from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.lib.embedder import EmbedderResource, minilm_path
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource, definition_params
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "evaluation"
EVALUATED = ["ok", "parse_error"]  # invalid replies count as wrong; LLM / input failures are excluded
KEEP = ["dataset", "dialogue_id", "query_id", "subtype", "persona", "turn", "reference_action", "reference_question"]
DIALOGUE_COLUMNS = [*KEEP, "n_turns", "messages", "status", "error"]


def partitions_for(params: Params) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition({
        "subject": dg.StaticPartitionsDefinition(list(params.llm.subjects)),
        "method": dg.StaticPartitionsDefinition(list(params.evaluation.methods)),
    })


def method_settings(p: Params) -> MethodSettings:
    c = p.evaluation
    return MethodSettings(max_tokens=c.subject_max_tokens, reasoning_max_tokens=c.reasoning_max_tokens,
                          agent_max_tokens=c.agent_max_tokens, vote_k=c.vote_k, vote_temperature=c.vote_temperature,
                          intent_k=c.intent_k, intent_temperature=c.intent_temperature, intent_tau=c.intent_tau,
                          seed=c.sample_seed)


def evaluation_dialogues(p: Params, persona_dialogues: pl.DataFrame, external: pl.DataFrame) -> pl.DataFrame:
    """The turns of every dataset in evaluation.datasets, in one schema, with a `dataset` column."""
    bench = persona_dialogues.with_columns(dataset=pl.lit(BENCHMARK_DATASET))
    frames = [bench.select(DIALOGUE_COLUMNS)] if BENCHMARK_DATASET in p.evaluation.datasets else []
    frames.append(external.filter(pl.col("dataset").is_in(p.evaluation.datasets)).select(DIALOGUE_COLUMNS))
    return pl.concat(frames, how="vertical_relaxed")


def sampled_dialogues(p: Params, turns: pl.DataFrame) -> pl.DataFrame:
    """(dataset, dialogue_id) pairs evaluated: all, or evaluation.max_dialogues per dataset over personas."""
    order = [x.key for x in PERSONAS]
    picked = []
    for (dataset,), g in turns.group_by(["dataset"], maintain_order=True):
        dialogues = g.group_by("dialogue_id").agg(pl.col("persona").first())
        ids = sample_dialogues(dialogues, p.evaluation.max_dialogues, p.evaluation.sample_seed, order)
        picked += [{"dataset": dataset, "dialogue_id": d} for d in ids]
    return pl.DataFrame(picked, schema={"dataset": pl.Utf8, "dialogue_id": pl.Utf8})


def build_assets(params: Params) -> tuple:
    """The group's assets; the predictions partitions come from ``params`` (subjects x methods)."""
    partitions = partitions_for(params)

    @dg.multi_asset(
        group_name=GROUP, can_subset=False,
        outs={"external_dialogues": dg.AssetOut(key=[GROUP, "external_dialogues"], kinds={"polars"}),
              "external_dialogues_rejected": dg.AssetOut(key=[GROUP, "external_dialogues_rejected"],
                                                         kinds={"polars"})},
    )
    def external_dialogues(context: dg.AssetExecutionContext, params: ParamsResource):
        """Public clarification datasets (CLAMBER, ClariQ, generic JSONL/CSV) in the benchmark's turn schema.

        Only datasets named in evaluation.datasets are read. Malformed records go to
        `external_dialogues_rejected` with file, record number, field and reason.
        """
        p = params.load()
        turns, rejected, meta = [pl.DataFrame(schema=TURN_SCHEMA)], [pl.DataFrame(schema=REJECTED_SCHEMA)], {}
        for name in p.evaluation.datasets:
            if name == BENCHMARK_DATASET:
                continue
            ds = p.evaluation.external[name]
            try:
                res = import_dataset(name, ds.format, ds.path, ds.limit, ds.clariq_clarify_from)
            except ExternalDataError as err:
                raise dg.Failure(description=f"evaluation.external.{name}: {err}") from None
            turns.append(res.turns)
            rejected.append(res.rejected)
            meta |= {f"{name}/{k}": v for k, v in res.summary().items()}
        t, r = pl.concat(turns), pl.concat(rejected)
        context.add_output_metadata(meta | {"turns": t.height}, output_name="external_dialogues")
        context.add_output_metadata({"rejected": r.height}, output_name="external_dialogues_rejected")
        return t, r

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, partitions_def=partitions,
              ins={"persona_dialogues": dg.AssetIn(key=["benchmark", "persona_dialogues"]),
                   "external_dialogues": dg.AssetIn(key=[GROUP, "external_dialogues"])})
    def predictions(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                    embedder: EmbedderResource, persona_dialogues: pl.DataFrame,
                    external_dialogues: pl.DataFrame) -> pl.DataFrame:
        """One row per (subject, method, dialogue turn): decision, question/answer, trace, LLM calls, status."""
        p = params.load()
        keys = context.partition_key.keys_by_dimension
        subject, method_name = keys["subject"], keys["method"]
        if subject not in p.llm.subjects:
            raise dg.Failure(description=f"subject {subject!r} is not in params.yaml llm.subjects "
                                         f"{sorted(p.llm.subjects)}: reload the code location")
        turns = evaluation_dialogues(p, persona_dialogues, external_dialogues)
        chosen = sampled_dialogues(p, turns)
        selected = turns.join(chosen, on=["dataset", "dialogue_id"], how="semi")
        usable, skipped = selected.filter(pl.col("status") == "ok"), selected.filter(pl.col("status") != "ok")
        method = build_method(method_name, method_settings(p))
        role, replies = f"subject:{subject}", []

        def chat(requests):
            results = llm.chat(role, requests, context)
            replies.extend(results)
            return results

        started = time.monotonic()
        dialogue_turns = turns_from_frame(usable.with_columns(
            dialogue_id=pl.format("{}/{}", pl.col("dataset"), pl.col("dialogue_id"))))
        preds = method.predict(dialogue_turns, chat, embedder.encode)
        seconds = time.monotonic() - started
        done = pl.concat([usable.select(KEEP), predictions_frame(preds)], how="horizontal")
        lost = skipped.select(*KEEP, "status").with_columns(
            action=pl.lit("invalid"), status=pl.lit("input_error"), llm_calls=pl.lit(0, pl.Int64),
            error=pl.format("dialogue turn not usable: {}", pl.col("status")))
        out = pl.concat([done, lost], how="diagonal_relaxed").with_columns(
            subject=pl.lit(subject), method=pl.lit(method_name),
            source=pl.when(pl.col("dataset") == BENCHMARK_DATASET).then(pl.lit("benchmark.persona_dialogues"))
            .otherwise(pl.lit("evaluation.external_dialogues")))
        out = out.select("subject", "method", *[c for c in out.columns if c not in ("subject", "method")])
        evaluated = done.filter(pl.col("status").is_in(EVALUATED))
        context.add_output_metadata({
            **llm.usage(role, replies),
            "rows": out.height, "dialogues": chosen.height, "dialogues_available": turns["dialogue_id"].n_unique(),
            "evaluated_turns": evaluated.height, "parse_errors": int((done["status"] == "parse_error").sum()),
            "llm_errors": int((done["status"] == "llm_error").sum()), "input_errors": lost.height,
            "invalid_outputs": int((done["action"] == "invalid").sum()),
            "accuracy": round(float((evaluated["action"] == evaluated["reference_action"]).mean() or 0.0), 4),
            "llm_calls_per_turn": round(float(done["llm_calls"].mean() or 0.0), 3),
            "llm_calls_per_turn_max": calls_per_turn(method_settings(p))[method_name],
            "seconds": round(seconds, 1),
        })
        return out

    judge_ins = {"predictions": dg.AssetIn(key=[GROUP, "predictions"]),
                 "persona_dialogues": dg.AssetIn(key=["benchmark", "persona_dialogues"]),
                 "external_dialogues": dg.AssetIn(key=[GROUP, "external_dialogues"])}

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, ins=judge_ins)
    def judge_scores(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                     predictions: pl.DataFrame, persona_dialogues: pl.DataFrame,
                     external_dialogues: pl.DataFrame) -> pl.DataFrame:
        """Generated clarifying questions vs the reference: LLM judge 0-5 on a per-subtype sample,
        token-F1 and BERTScore-F1 on every clarify turn where the method asked."""
        p = params.load()
        cfg = p.evaluation
        msgs = evaluation_dialogues(p, persona_dialogues, external_dialogues).select("dataset", "dialogue_id", "turn",
                                                                                     "messages")
        cands = candidate_turns(predictions).select(
            "dataset", "subject", "method", "dialogue_id", "turn", "subtype", "persona", "reference_question",
            "action", "response")
        items = sample_items(cands, cfg.judge_per_subtype, cfg.sample_seed).with_columns(sampled=pl.lit(True))
        rows = (cands.join(items, on=["dataset", "dialogue_id", "turn"], how="left")
                .with_columns(pl.col("sampled").fill_null(False), asked=asked_expr("action", "response"))
                .join(msgs, on=["dataset", "dialogue_id", "turn"], how="left")
                .sort("dataset", "subject", "method", "dialogue_id", "turn"))
        to_judge = rows.with_row_index("_i").filter(pl.col("sampled") & pl.col("asked"))
        reqs = pointwise_requests(to_judge)
        results = llm.chat("judge", reqs, context) if reqs else []
        judged = {i: (parse_score(r), r) for i, r in zip(to_judge["_i"].to_list(), results)}
        score, status, error, raw, by = [], [], [], [], []
        for i, r in enumerate(rows.iter_rows(named=True)):
            if i in judged:
                (s, st, err), res = judged[i]
                score.append(s), status.append(st), error.append(err), raw.append(res.text), by.append("judge")
            elif r["sampled"]:  # the reference asks but the method did not: 0 by the rubric
                score.append(0), status.append("ok"), error.append(None), raw.append(None), by.append("rule")
            else:
                score.append(None), status.append(None), error.append(None), raw.append(None), by.append(None)
        asked = rows.filter(pl.col("asked"))
        f1 = [token_f1(c, r) for c, r in zip(asked["response"], asked["reference_question"])]
        bert = (bertscore_f1(asked["response"].to_list(), asked["reference_question"].to_list(), minilm_path(),
                             cfg.bertscore_layers) if cfg.bertscore and asked.height else [None] * asked.height)
        text_scores = asked.select("dataset", "subject", "method", "dialogue_id", "turn").with_columns(
            token_f1=pl.Series(f1, dtype=pl.Float64), bertscore_f1=pl.Series(bert, dtype=pl.Float64))
        out = (rows.drop("messages").with_columns(
            judged_by=pl.Series(by, dtype=pl.Utf8), score=pl.Series(score, dtype=pl.Int64),
            status=pl.Series(status, dtype=pl.Utf8), error=pl.Series(error, dtype=pl.Utf8),
            raw_output=pl.Series(raw, dtype=pl.Utf8))
            .join(text_scores, on=["dataset", "subject", "method", "dialogue_id", "turn"], how="left")
            .with_columns(model=pl.lit(p.llm.role("judge").model),
                          prompt_version=pl.lit(reqs[0].prompt_version if reqs else None, pl.Utf8)))
        context.add_output_metadata({
            **llm.usage("judge", results), "candidate_turns": out.height, "sampled_items": items.height,
            "judged_by_llm": len(judged), "scored_zero_by_rule": by.count("rule"),
            "judge_parse_errors": status.count("parse_error"), "bertscore": cfg.bertscore,
        })
        return out

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"}, ins=judge_ins)
    def pairwise_judgements(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                            predictions: pl.DataFrame, persona_dialogues: pl.DataFrame,
                            external_dialogues: pl.DataFrame) -> pl.DataFrame:
        """Win / tie / lose between two methods' questions (evaluation.judge_pairs), judged twice with the
        positions swapped: a win must hold in both orders."""
        p = params.load()
        cfg = p.evaluation
        msgs = evaluation_dialogues(p, persona_dialogues, external_dialogues).select("dataset", "dialogue_id", "turn",
                                                                                     "messages")
        cands = candidate_turns(predictions)
        items = sample_items(cands, cfg.judge_per_subtype, cfg.sample_seed)
        cols = ["dataset", "subject", "dialogue_id", "turn"]
        frames = []
        for a, b in cfg.judge_pairs:
            side = [cands.filter(pl.col("method") == m).join(items, on=["dataset", "dialogue_id", "turn"], how="semi")
                    .select(*cols, "subtype", "reference_question", pl.col("action").alias(f"action_{x}"),
                            pl.col("response").alias(f"question_{x}")) for m, x in ((a, "a"), (b, "b"))]
            frames.append(side[0].join(side[1].drop("subtype", "reference_question"), on=cols, how="inner")
                          .with_columns(method_a=pl.lit(a), method_b=pl.lit(b)))
        pairs = pl.concat(frames) if frames else pl.DataFrame(schema={
            **{c: pl.Utf8 for c in ("dataset", "subject", "dialogue_id")}, "turn": pl.Int64, "subtype": pl.Utf8,
            "reference_question": pl.Utf8, "action_a": pl.Utf8, "question_a": pl.Utf8, "action_b": pl.Utf8,
            "question_b": pl.Utf8, "method_a": pl.Utf8, "method_b": pl.Utf8})
        pairs = pairs.join(msgs, on=["dataset", "dialogue_id", "turn"], how="left").with_columns(
            asked_a=asked_expr("action_a", "question_a"), asked_b=asked_expr("action_b", "question_b"))
        both = pairs.with_row_index("_i").filter(pl.col("asked_a") & pl.col("asked_b"))
        reqs = pairwise_requests(both)
        results = llm.chat("judge", reqs, context) if reqs else []
        verdicts = {i: (results[2 * k], results[2 * k + 1]) for k, i in enumerate(both["_i"].to_list())}
        rows = []
        for i, r in enumerate(pairs.iter_rows(named=True)):
            rule = rule_outcome(r["asked_a"], r["asked_b"])
            if rule is not None:
                rows.append({"outcome": rule, "judged_by": "rule", "verdict_ab": None, "verdict_ba": None,
                             "status": "ok", "error": None, "raw_ab": None, "raw_ba": None})
                continue
            res_ab, res_ba = verdicts[i]
            (v_ab, e_ab), (v_ba, e_ba) = parse_verdict(res_ab), parse_verdict(res_ba)
            err = e_ab or e_ba
            status = "ok" if not err else ("llm_error" if res_ab.error or res_ba.error else "parse_error")
            rows.append({"outcome": pairwise_outcome(v_ab, v_ba) if not err else None, "judged_by": "judge",
                         "verdict_ab": v_ab, "verdict_ba": v_ba, "status": status, "error": err,
                         "raw_ab": res_ab.text, "raw_ba": res_ba.text})
        extra = pl.DataFrame(rows, schema={"outcome": pl.Utf8, "judged_by": pl.Utf8, "verdict_ab": pl.Utf8,
                                           "verdict_ba": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8,
                                           "raw_ab": pl.Utf8, "raw_ba": pl.Utf8})
        out = pl.concat([pairs.drop("messages"), extra], how="horizontal").with_columns(
            model=pl.lit(p.llm.role("judge").model),
            prompt_version=pl.lit(reqs[0].prompt_version if reqs else None, pl.Utf8))
        context.add_output_metadata({**llm.usage("judge", results), "pairs": out.height,
                                     "judged_by_llm": both.height,
                                     "outcomes": dg.MetadataValue.json(
                                         dict(out.group_by("outcome").len().iter_rows()) if out.height else {})})
        return out

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
              ins={"predictions": dg.AssetIn(key=[GROUP, "predictions"])})
    def metric_tables(context: dg.AssetExecutionContext, predictions: pl.DataFrame) -> pl.DataFrame:
        """Accuracy, under-/over-clarification, invalid share: overall, by turn, persona, subtype,
        subtype x turn (Table 4) and persona x turn (Table 5 at turn 2), per dataset x subject x method."""
        evaluated = predictions.filter(pl.col("status").is_in(EVALUATED))
        out = evaluation_tables(evaluated)
        overall = out.filter(pl.col("breakdown") == "overall")
        context.add_output_metadata({
            "evaluated_turns": evaluated.height, "excluded_turns": predictions.height - evaluated.height,
            "overall": dg.MetadataValue.md(markdown_table(overall.drop("persona", "subtype", "turn"))),
        })
        return out

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
              ins={"predictions": dg.AssetIn(key=[GROUP, "predictions"]),
                   "judge_scores": dg.AssetIn(key=[GROUP, "judge_scores"])})
    def method_comparison(context: dg.AssetExecutionContext, params: ParamsResource, predictions: pl.DataFrame,
                          judge_scores: pl.DataFrame) -> pl.DataFrame:
        """Methods side by side per backbone (Tables 5/6): per-persona accuracy at the comparison turn and
        over all turns, Avg./Std., macro-F1, calls per turn, paired tests vs ClarifyAgent, question quality."""
        cfg = params.load().evaluation
        evaluated = predictions.filter(pl.col("status").is_in(EVALUATED))
        out = compare_methods(evaluated, cfg.agent_method, cfg.comparison_turn, cfg.significance_alpha,
                              question_quality(judge_scores))
        if out.is_empty():
            return out
        table = out.filter(pl.col("scope") == f"turn_{cfg.comparison_turn}").select(
            "dataset", "subject", "method", "n", "accuracy", "persona_avg", "persona_std", "calls_per_turn")
        context.add_output_metadata({"rows": out.height, "comparison": dg.MetadataValue.md(markdown_table(table))})
        return out

    @dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
              ins={"metric_tables": dg.AssetIn(key=[GROUP, "metric_tables"]),
                   "method_comparison": dg.AssetIn(key=[GROUP, "method_comparison"]),
                   "judge_scores": dg.AssetIn(key=[GROUP, "judge_scores"]),
                   "pairwise_judgements": dg.AssetIn(key=[GROUP, "pairwise_judgements"]),
                   "predictions": dg.AssetIn(key=[GROUP, "predictions"])})
    def report(context: dg.AssetExecutionContext, params: ParamsResource, metric_tables: pl.DataFrame,
               method_comparison: pl.DataFrame, judge_scores: pl.DataFrame, pairwise_judgements: pl.DataFrame,
               predictions: pl.DataFrame) -> pl.DataFrame:
        """report.md + a self-contained report.html (plots inlined) + the plots as PNG, under
        assets/evaluation/report/."""
        p = params.load()
        inputs = ReportInputs(metric_tables, method_comparison, judge_scores, pairwise_judgements, predictions,
                              p.evaluation.comparison_turn, p.evaluation.agent_method, p.evaluation.max_dialogues,
                              p.evaluation.sample_seed)
        folder = Path(ASSETS_DIR) / GROUP / "report"
        folder.mkdir(parents=True, exist_ok=True)
        plots = report_plots(inputs)
        for name, png in plots.items():
            (folder / name).write_bytes(png)
        text = render_report(inputs, list(plots))
        (folder / "report.md").write_text(text)
        (folder / "report.html").write_text(render_html(text, plots))
        files = [folder / "report.md", folder / "report.html", *(folder / n for n in plots)]
        context.add_output_metadata({"report": dg.MetadataValue.path(str(folder / "report.html")),
                                     "preview": dg.MetadataValue.md(text)})
        return pl.DataFrame({"file": [str(f) for f in files], "bytes": [f.stat().st_size for f in files]})

    return (external_dialogues, predictions, judge_scores, pairwise_judgements, metric_tables, method_comparison,
            report)


(external_dialogues, predictions, judge_scores, pairwise_judgements, metric_tables, method_comparison,
 report) = build_assets(definition_params())
