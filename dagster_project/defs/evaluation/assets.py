"""Group `evaluation`: methods x subject models on every dialogue turn, LLM judge, metric tables and the report.

`predictions` is partitioned by subject x method (both lists come from params.yaml: llm.subjects and
evaluation.methods), so a new model or method materializes only its own partitions. Everything else
reads all partitions.
"""

import json
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from dagster_project.io.status import Status
from dagster_project.config import BENCHMARK_DATASET, CLARILM_DATASET, Params
from dagster_project.core.clarifymt.agent.predictions import (
    EVALUATED,
    evaluation_dialogues,
    predict_turns,
    prediction_stats,
    sampled_dialogues,
)
from dagster_project.core.clarifymt.external import (
    TURN_SCHEMA,
    held_out_turns,
    import_dataset,
)
from dagster_project.core.clarifymt.judge import SCORED_COLUMNS
from dagster_project.core.clarifymt.judge import judge_scores as score_questions
from dagster_project.core.clarifymt.judge import pairwise_judgements as judge_pairs
from dagster_project.core.clarifymt.metrics import evaluation_tables
from dagster_project.core.clarifymt.metrics import method_comparison as compare_methods
from dagster_project.core.clarifymt.report import ReportInputs, question_quality
from dagster_project.core.clarifymt.report_page import report_files
from dagster_project.core.clarifymt.trained import subject_method
from dagster_project.core.clarifymt.trained import trained_comparison as compare_trained
from dagster_project.core.shared.metrics import bertscore_f1
from dagster_project.core.shared.tables import markdown_table
from dagster_project.core.training.overlap import held_out_overlaps
from dagster_project.core.training.reference import reference_problem
from dagster_project.io.records import InputFileError, Quarantine
from dagster_project.io.writers import atomic_path
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.lib.resources import EmbedderResource, LLMResource
from dagster_project.llm.vector_cache import VectorCache
from dagster_project.lib.warehouse import ASSETS_DIR, COLUMNS, read_asset
from dagster_project.llm.trained import training_meta, training_name
from dagster_project.training.exports import MissingExport, export_user_texts, model_template, trained_on

GROUP = "evaluation"
asset = group_asset(GROUP)
SINGLE_RUN = dg.BackfillPolicy.single_run()  # a run may cover many subject x method keys (fewer runs per stage)
# backfill_policy is marked beta on @asset; it is the documented way to get single-run backfills
warnings.filterwarnings("ignore", r"Parameter `backfill_policy`", dg.BetaWarning)


def dialogue_ins(params: Params) -> dict[str, dg.AssetIn]:
    """The dialogue inputs: external_dialogues, plus the benchmark's persona_dialogues only when
    evaluation.datasets names clarifymt (evaluating only external datasets needs no benchmark outputs)."""
    refs = ["evaluation/external_dialogues"]
    if BENCHMARK_DATASET in params.evaluation.datasets:
        refs.insert(0, "benchmark/persona_dialogues")
    return upstream(*refs)


def _turns(params: Params, dialogues: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Every evaluated turn from the dialogue inputs (keys as in dialogue_ins)."""
    return evaluation_dialogues(params.evaluation, dialogues.get("persona_dialogues"), dialogues["external_dialogues"])


def partitions_for(params: Params) -> dg.MultiPartitionsDefinition:
    """subject (llm.subjects) x method (evaluation.methods)."""
    return dg.MultiPartitionsDefinition({
        "subject": dg.StaticPartitionsDefinition(list(params.llm.subjects)),
        "method": dg.StaticPartitionsDefinition(list(params.evaluation.methods)),
    })


def _messages(params: Params, dialogues: dict[str, pl.DataFrame]) -> pl.DataFrame:
    return _turns(params, dialogues).select("dataset", "dialogue_id", "turn", "messages")


def planned_partitions(params: Params) -> list[str]:
    """The subject x method keys evaluation.subject_methods plans (every key when it is empty): what
    `clarify materialize evaluation` runs; the others exist in the grid but are skipped."""
    pdef = partitions_for(params)
    return [k for k in pdef.get_partition_keys()
            if k.keys_by_dimension["method"] in params.evaluation.methods_for(k.keys_by_dimension["subject"])]


def planned_input(params: Params, columns: Sequence[str] | None = None) -> dg.AssetIn:
    """evaluation/predictions as the downstream assets read it: the planned partitions only (the others are in the
    grid but never run, so their absence is no gap to warn about); `columns`: read only these."""
    return dg.AssetIn(key=[GROUP, "predictions"], metadata={COLUMNS: list(columns)} if columns else None,
                      partition_mapping=dg.SpecificPartitionsPartitionMapping(planned_partitions(params)))


def subject_datasets(params: Params, subject: str) -> list[str]:
    """The datasets `subject` is evaluated on: evaluation.trained_datasets for a subject served from
    training/<name> or named in a trained comparison (both sides see the same turns), else every dataset; plus
    judge_subject_datasets for a subject of a judge_subject_pairs entry (the model-vs-model judge needs them)."""
    ev = params.evaluation
    trained = {n for n, c in params.llm.subjects.items() if c.model.startswith("training/")}
    compared = {s for pair in params.trained_pairs() for s in pair}
    chosen = set(ev.trained_datasets) if ev.trained_datasets and subject in trained | compared else set(ev.datasets)
    if any(subject in pair for pair in ev.judge_subject_pairs):
        chosen |= set(ev.judge_subject_datasets or ())
    return [d for d in ev.datasets if d in chosen]


def training_deps(params: Params) -> list[dg.AssetKey]:
    """training/<name> for every subject served from a trained model: the lineage edge training -> predictions."""
    names = {training_name(cfg.model) for cfg in params.llm.subjects.values()}
    return [dg.AssetKey(["training", n]) for n in sorted(n for n in names if n)]


@dg.multi_asset(
    group_name=GROUP, can_subset=False, deps=[dg.AssetKey(["annotations", "held_out_set"])],
    outs={"external_dialogues": dg.AssetOut(key=[GROUP, "external_dialogues"], kinds={"polars"}),
          "external_dialogues_rejected": dg.AssetOut(key=[GROUP, "external_dialogues_rejected"], kinds={"polars"})},
)
def external_dialogues(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params]):
    """Public clarification datasets (CLAMBER, ClariQ, IN3, generic JSONL/CSV) and ClariLM's held-out split
    (clarilm_test, from annotations/held_out_set) in the benchmark's turn schema.

    Only datasets named in evaluation.datasets are read. Malformed records go to
    `external_dialogues_rejected` with file, record number, field and reason.
    """
    turns, rejected, meta = [pl.DataFrame(schema=TURN_SCHEMA)], Quarantine(), {}
    for name in params.evaluation.datasets:
        if name == BENCHMARK_DATASET:
            continue
        if name == CLARILM_DATASET:
            held_out = read_asset(ASSETS_DIR, "annotations", "held_out_set")
            if held_out is None:
                raise dg.Failure(description=f"evaluation.datasets lists {CLARILM_DATASET} but "
                                             f"{ASSETS_DIR}/annotations/held_out_set.parquet is missing: "
                                             "run `clarify materialize annotations` first")
            turns.append(held_out_turns(held_out, name))
            meta[f"{name}/questions"] = held_out.height
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

    ins = dialogue_ins(params)

    @asset(partitions_def=partitions_for(params), ins=ins, deps=training_deps(params), backfill_policy=SINGLE_RUN)
    def predictions(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                    llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource,
                    **dialogues: pl.DataFrame):  # a frame, or {key: staged Parquet file} for a range of keys
        """One row per (subject, method, dialogue turn): decision, question/answer, trace, LLM calls, status. A run
        covers one subject x method key, or a range of them (`clarify materialize evaluation`: one run per
        rectangle of planned keys), each key with its own metadata."""
        turns = _turns(params, dialogues)
        sampled = sampled_dialogues(params.evaluation, turns)
        pdef = partitions_for(params)
        keys = [k if hasattr(k, "keys_by_dimension") else pdef.get_partition_key_from_str(k)
                for k in context.partition_keys]
        with tempfile.TemporaryDirectory(prefix="predictions_") as tmp:
            out: dict[str, pl.DataFrame | Path] = {}
            for i, key in enumerate(keys):
                frame, meta = _predict(context, params, llm, embedder, key.keys_by_dimension, turns, sampled)
                context.add_asset_metadata(meta, partition_key=key)
                if len(keys) == 1:
                    out[key] = frame
                else:  # staged, so a run over many keys holds one key's rows at a time; the IO manager moves it
                    out[key] = Path(tmp, f"{i}.parquet")
                    frame.write_parquet(out[key])
            yield dg.Output(out if len(keys) > 1 else out[keys[0]])

    planned = {"predictions": planned_input(params)}
    judged = {**planned, **upstream("evaluation/judge_scores")}
    tables = upstream("evaluation/metric_tables", "evaluation/method_comparison", "evaluation/judge_scores",
                      "evaluation/pairwise_judgements", "evaluation/trained_comparison")
    return dg.Definitions(assets=[
        external_dialogues, predictions,
        asset(judge_scores, name="judge_scores", ins={"predictions": planned_input(params, SCORED_COLUMNS), **ins}),
        asset(pairwise_judgements, name="pairwise_judgements", ins={**planned, **ins}),
        asset(metric_tables, name="metric_tables", ins=planned),
        asset(method_comparison, name="method_comparison", ins=judged),
        asset(trained_comparison, name="trained_comparison", ins=judged),
        asset(report, name="report", ins={**tables, **planned},
              deps=[dg.AssetKey(["benchmark", "annotation_agreement"])])],
        asset_checks=[held_out_check(ins)])


def _predict(context: dg.AssetExecutionContext, params: Params, llm: LLMResource, embedder: EmbedderResource,
             key: dict[str, str], turns: pl.DataFrame, sampled: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
    """One subject x method partition of `predictions`: its rows and its metadata (usage, outcome counts)."""
    subject, method_name = key["subject"], key["method"]
    if subject not in params.llm.subjects:
        raise dg.Failure(description=f"subject {subject!r} is not in params.yaml llm.subjects "
                                     f"{sorted(params.llm.subjects)}: reload the code location")
    datasets = [d for d in subject_datasets(params, subject) if method_name in params.evaluation.methods_on(d)]
    chosen = sampled.filter(pl.col("dataset").is_in(datasets))
    selected = turns.join(chosen, on=["dataset", "dialogue_id"], how="semi")
    planned = method_name in params.evaluation.methods_for(subject)
    if not planned:  # an empty partition, so a UI backfill of the whole grid does not fail on it
        context.log.info(f"{subject} x {method_name}: skipped (evaluation.subject_methods.{subject})")
        selected, chosen = selected.head(0), chosen.head(0)
    method, blocked = subject_method(subject, params.llm.subjects[subject].model, method_name, params.evaluation)
    blocked = blocked if planned else None
    if blocked:
        context.log.warning(f"{subject} x {method_name}: every turn is an input_error row: {blocked}")
    chat = llm.session(context)
    started = time.monotonic()
    out = predict_turns(method, subject, selected, chat, embedder.encode, blocked=blocked)
    return out, {
        **({"model_missing": blocked} if blocked else {}),
        **chat.usage(), **prediction_stats(out), "dialogues": chosen.height, "datasets": ", ".join(datasets),
        "dialogues_available": turns["dialogue_id"].n_unique(),
        "llm_calls_per_turn_max": method.calls_per_turn, "seconds": round(time.monotonic() - started, 1),
        "planned": planned,
    }


def judge_scores(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                 llm: dg.ResourceParam[LLMResource], embedder: EmbedderResource, predictions: pl.DataFrame,
                 **dialogues: pl.DataFrame) -> pl.DataFrame:
    """Generated clarifying questions vs the reference: LLM judge 0-5 on a per-subtype sample,
    token-F1 and BERTScore-F1 on every clarify turn where the method asked."""
    cfg = params.evaluation
    chat = llm.session(context)

    cache = VectorCache(params.embedder.cache_path) if params.embedder.cache_path else None

    def bertscore(candidates: list[str], references: list[str]) -> list[float]:
        """BERTScore-F1 per pair; pairs a run already scored come from the vector cache."""
        if cache is None or not candidates:
            return bertscore_f1(candidates, references, embedder.model_path(), cfg.bertscore_layers)

        def score(pairs: list[str]) -> np.ndarray:
            c, r = zip(*map(json.loads, pairs), strict=True)
            return np.asarray(bertscore_f1(list(c), list(r), embedder.model_path(), cfg.bertscore_layers))

        pairs = [json.dumps([c, r]) for c, r in zip(candidates, references, strict=True)]
        return [float(x) for x in cache.rows(f"bertscore:{embedder.model}:{cfg.bertscore_layers}", pairs, score)[:, 0]]

    judge = params.llm.role("judge")
    # a remote judge's calls wait on the network: BERTScore runs beside them; a local one would share the cores
    out = score_questions(chat, predictions, _messages(params, dialogues), cfg, judge.model,
                          bertscore if cfg.bertscore else None, overlap=judge.backend == "openai")
    sampled = out.filter(pl.col("sampled"))
    context.add_output_metadata({
        **chat.usage(), "candidate_turns": out.height,
        "sampled_items": sampled.select("dataset", "dialogue_id", "turn").n_unique() if sampled.height else 0,
        "judged_by_llm": int((out["judged_by"] == "judge").sum()),
        "scored_zero_by_rule": int((out["judged_by"] == "rule").sum()),
        "judge_parse_errors": int((out["status"] == Status.PARSE_ERROR).sum()), "bertscore": cfg.bertscore,
    })
    return out


def pairwise_judgements(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        llm: dg.ResourceParam[LLMResource], predictions: pl.DataFrame,
                        **dialogues: pl.DataFrame) -> pl.DataFrame:
    """Win / tie / lose between two methods of a subject (evaluation.judge_pairs) and between two subjects
    (judge_subject_pairs, ClariLM Fig. 4): their whole replies without a reference (pairwise_mode: output, as
    ClariLM) or their questions against the reference (reference_question), judged twice with the positions
    swapped: a win must hold in both orders."""
    chat = llm.session(context)
    out = judge_pairs(chat, predictions, _messages(params, dialogues), params.evaluation,
                      params.llm.role("judge").model)
    context.add_output_metadata({
        **chat.usage(), "mode": params.evaluation.pairwise_mode, "pairs": out.height,
        "subject_pair_items": int((out["comparison"] == "subjects").sum()),
        "judged_by_llm": int((out["judged_by"] == "judge").sum()),
        "outcomes": dg.MetadataValue.json(dict(out.group_by("outcome").len().iter_rows()) if out.height else {})})
    return out


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


def method_comparison(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], predictions: pl.DataFrame,
                      judge_scores: pl.DataFrame) -> pl.DataFrame:
    """Methods side by side per backbone (Tables 5/6): per-persona accuracy at the comparison turn and
    over all turns, Avg./Std., macro-F1, calls per turn, paired tests vs ClarifyAgent, question quality."""
    cfg = params.evaluation
    channel = "structured" if cfg.structured_output else "free_text"
    out = compare_methods(predictions, cfg.agent_method, cfg.comparison_turn, cfg.significance_alpha,
                          question_quality(judge_scores), cfg.min_n_significance, cfg.ttest_min_n,
                          cfg.clarify_must_be_question, cfg.significance_baselines, channel, cfg.sample_seed)
    if out.is_empty():
        return out
    table = out.filter(pl.col("scope") == f"turn_{cfg.comparison_turn}").select(
        "dataset", "subject", "method", "decision_channel", "n", "n_queries", "accuracy", "accuracy_ci_low",
        "accuracy_ci_high", "protocol_compliance", "question_share", "truncated_share", "llm_errors", "persona_avg",
        "persona_std", "calls_per_turn", "p_holm")
    corrections = sorted({c for c in out["correction"].drop_nulls().to_list() if c.startswith("holm")})
    context.add_output_metadata({"rows": out.height, "decision_channel": channel,
                                 "correction": "; ".join(corrections) or "none (no baseline evaluated)",
                                 "comparison": dg.MetadataValue.md(markdown_table(table))})
    return out


def trained_comparison(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], predictions: pl.DataFrame,
                       judge_scores: pl.DataFrame) -> pl.DataFrame:
    """Trained subjects vs their reference (evaluation.trained_baseline / trained_pairs) with evaluation.trained_method
    on the same held-out turns: accuracy (n, Wilson CI), clarify-class F1, macro-F1, protocol compliance,
    under/over-clarification, judge score, and the paired test; `verdict` says plainly whether the trained model
    improved. Fails, naming both, when a reference is not the training base served the same way."""
    cfg = params.evaluation
    subjects = params.llm.subjects
    unfair = [why for s, r in params.trained_pairs()
              if (why := reference_problem(s, subjects[s], r, subjects[r], params.training.base_model))]
    if unfair:
        raise dg.Failure(description="\n".join(unfair), metadata={"unfair_pairs": len(unfair)})
    out = compare_trained(predictions, params.trained_pairs(), cfg.trained_method, question_quality(judge_scores),
                          cfg.significance_alpha, cfg.min_n_significance, cfg.ttest_min_n, cfg.clarify_must_be_question)
    context.add_output_metadata({"pairs": len(params.trained_pairs()), "rows": out.height,
                                 "verdicts": dg.MetadataValue.json(dict(out.group_by("verdict").len().iter_rows()))})
    return out


MAX_PAIRS = 200  # overlapping pairs listed in the check's metadata


def held_out_check(ins: dict[str, dg.AssetIn]) -> dg.AssetChecksDefinition:
    """`held_out_disjoint` on trained_comparison (blocking), reading the dialogue inputs the params ask for (asset
    checks take named inputs only)."""
    deco = dg.asset_check(asset=dg.AssetKey([GROUP, "trained_comparison"]), name="held_out_disjoint", blocking=True,
                          additional_ins=ins)
    if "persona_dialogues" in ins:
        def check(params: dg.ResourceParam[Params], embedder: EmbedderResource, persona_dialogues: pl.DataFrame,
                  external_dialogues: pl.DataFrame) -> dg.AssetCheckResult:
            return held_out_disjoint(params, embedder.encode, persona_dialogues=persona_dialogues,
                                     external_dialogues=external_dialogues)
    else:
        def check(params: dg.ResourceParam[Params], embedder: EmbedderResource,
                  external_dialogues: pl.DataFrame) -> dg.AssetCheckResult:
            return held_out_disjoint(params, embedder.encode, external_dialogues=external_dialogues)
    check.__doc__ = held_out_disjoint.__doc__
    return deco(check)


def trained_exports(params: Params) -> tuple[dict[str, list[str]], set[str]]:
    """(export -> the trained subjects trained on it, the trained subjects whose training folder holds no
    training.json: never built, so every prediction of theirs is an input_error row naming the folder)."""
    out: dict[str, list[str]] = {}
    unbuilt = set()
    for subject, cfg in params.llm.subjects.items():
        name = training_name(cfg.model)
        if name:
            for ref in trained_on(name):
                out.setdefault(ref, []).append(subject)
            if training_meta(cfg.model) is None:
                unbuilt.add(subject)
    return out, unbuilt


def held_out_disjoint(params: Params, encode: Callable[[list[str]], np.ndarray],
                      **dialogues: pl.DataFrame) -> dg.AssetCheckResult:
    """No evaluation query (first user turn) occurs in any export an evaluated trained model was trained on: not as
    the same normalized text, not as a near-duplicate (MiniLM cosine >= training.held_out_min_cosine). Fails, naming
    each overlapping pair, and fails when such an export does not exist (nothing could be checked) unless no model
    trained on it was built (`make loop` builds clarilm_sft only; params.yaml lists every trained subject)."""
    turns = _turns(params, dialogues)
    first = turns.filter(pl.col("turn") == 1).select("dialogue_id", "messages").explode("messages").unnest("messages")
    queries = first.filter(pl.col("role") == "user").group_by("dialogue_id").agg(pl.col("content").first())["content"]
    queries = queries.drop_nulls().to_list()
    used, unbuilt = trained_exports(params)
    texts, missing, skipped = {}, [], []
    for ref, subjects in used.items():
        try:
            texts[ref] = export_user_texts(ref, all_rows=ref.startswith("intents/") and params.intents.sweep_train)
        except MissingExport as err:
            if set(subjects) <= unbuilt:  # nothing was trained on it, nothing evaluated (e.g. `make loop`)
                skipped.append(f"{ref} (for {', '.join(subjects)}: not built)")
            else:
                missing.append(f"{err} (trained on by {', '.join(subjects)})")
        else:
            template = model_template(training_name(params.llm.subjects[subjects[0]].model) or "", params)
            texts[ref] = [template.unwrap(t) for t in texts[ref]]
    pairs = held_out_overlaps(queries, texts, encode, params.training.held_out_min_cosine)
    per_export = {ref: int((pairs["export"] == ref).sum()) for ref in used}
    shown = f" (first {MAX_PAIRS} of {pairs.height})" if pairs.height > MAX_PAIRS else ""
    return dg.AssetCheckResult(passed=pairs.is_empty() and not missing, metadata={
        "evaluation_queries": len(set(queries)), "exports_checked": len(texts),
        "min_cosine": params.training.held_out_min_cosine,
        "exact_pairs": int((pairs["match"] == "exact").sum()), "near_pairs": int((pairs["match"] == "near").sum()),
        **{f"overlap_{k.replace('/', '.').replace(':', '.')}": v for k, v in per_export.items()},
        **({"missing_exports": dg.MetadataValue.json(missing)} if missing else {}),
        **({"not_built": dg.MetadataValue.json(skipped)} if skipped else {}),
        "pairs": dg.MetadataValue.md(f"{shown}\n\n{markdown_table(pairs.head(MAX_PAIRS))}") if pairs.height else "none"})


def report(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params], metric_tables: pl.DataFrame,
           method_comparison: pl.DataFrame, judge_scores: pl.DataFrame, pairwise_judgements: pl.DataFrame,
           predictions: pl.DataFrame, trained_comparison: pl.DataFrame) -> pl.DataFrame:
    """report.md + a self-contained report.html (plots inlined) + the plots as PNG, under
    assets/evaluation/report/; it includes the benchmark's validation round when that was built."""
    cfg = params.evaluation
    validation = read_asset(ASSETS_DIR, "benchmark", "annotation_agreement")
    inputs = ReportInputs(metric_tables, method_comparison, judge_scores, pairwise_judgements, predictions,
                          cfg.comparison_turn, cfg.agent_method, cfg.max_dialogues, cfg.sample_seed, validation,
                          trained_comparison)
    folder = Path(ASSETS_DIR) / GROUP / "report"
    contents, text = report_files(inputs)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, data in contents.items():
        with atomic_path(folder / name, Path(name).suffix) as tmp:
            tmp.write_bytes(data)
        files.append(folder / name)
    context.add_output_metadata({"report": dg.MetadataValue.path(str(folder / "report.html")),
                                 "preview": dg.MetadataValue.md(text)})
    return pl.DataFrame({"file": [str(f) for f in files], "bytes": [f.stat().st_size for f in files]})
