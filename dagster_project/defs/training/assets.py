"""Group `training`: one asset per trained model, each reading the export it trains on (lineage export -> model).

annotations/sft_dataset -> clarilm_sft -> clarilm_dpo <- annotations/dpo_dataset        (ClariLM: SFT, then DPO)
logs/log_clarifications -> fm_log                                                      (ClariLM's FM-LOG facet miner)
annotations/sft_external_dataset, sft_dataset -> clarilm_sft_external / _ql / _full    (ClariLM's SFT baselines)
double_turn/training_exports -> double_turn_sft -> double_turn_dpo_candidates -> ... -> double_turn_dpo_exports
    -> double_turn_dpo, single_turn_dpo            (SFT, DPO candidates sampled from it, DPO per labelling)
intents/training_conversations -> intents_tuned (+ one model per sweep percentile)     (SDRS-filtered tuning)
retrieval/reranker_training + documents -> reranker_finetuned -> reranker_eval        (ClariMM fine-tuned baseline)
retrieval/reranker_training + documents + inferred_queries -> reranker_generative     (ClariMM trained re-ranker: yes/no)

Only the models named in training.models exist as assets. Each returns one row per model folder (trained,
skipped_unchanged or skipped_no_data with the reason; a DPO model whose SFT stage built no model is skipped, never
trained from the base instead); the folders are assets/training/<model>/. Each LM's training.json records the
template it was trained on (core/training/template.py), which every evaluation of it uses."""

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from dagster_project.config import Params
from dagster_project.core.clarilm.facets import fm_log_training_pairs
from dagster_project.core.clarilm.fm_log_data import sft_rows, training_pairs
from dagster_project.core.clarilm.sft_baselines import baseline_rows
from dagster_project.core.retrieval.metrics import ranking_metrics
from dagster_project.core.training.formats import trl_dpo_rows, trl_sft_rows
from dagster_project.core.training.sets import (
    intents_at_percentile,
    kept_messages,
    percentile_tag,
    rank_by_embedding,
    rerank_candidates,
    reranker_triplets,
)
from dagster_project.core.training.template import TrainedTemplate
from dagster_project.io.records import InputFileError
from dagster_project.lib.assets import group_asset, upstream
from dagster_project.training.lm_training import ADAPTER, LMJob, train_lm
from dagster_project.training.exports import jsonl_records, model_template
from dagster_project.training.model_folder import RESULT_SCHEMA, result_row
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "training"
EVAL_SCHEMA = {"ranker": pl.Utf8, "split": pl.Utf8, "n_queries": pl.Int64, "status": pl.Utf8, "reason": pl.Utf8}


def models_root() -> Path:
    return Path(ASSETS_DIR) / GROUP


def _table(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RESULT_SCHEMA)


def _emit(context: dg.AssetExecutionContext, table: pl.DataFrame) -> pl.DataFrame:
    """Metadata of a training asset: per model its status, rows, steps, final loss, wall time and folder."""
    meta: dict[str, Any] = {"models": table.height, "trained": int((table["status"] == "trained").sum())}
    for r in table.iter_rows(named=True):
        p = f"{r['model']}_" if table.height > 1 else ""
        meta |= {f"{p}status": r["status"], f"{p}rows": r["rows"]}
        meta |= {f"{p}{k}": r[k] for k in ("steps", "final_loss", "wall_s", "tokens_per_s") if r[k] is not None}
        if r["folder"]:
            meta[f"{p}folder"] = dg.MetadataValue.path(r["folder"])
        if r["reason"]:
            meta[f"{p}reason"] = r["reason"]
    context.add_output_metadata(meta)
    return table


def _frame_records(df: pl.DataFrame, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    return df.select(columns).to_dicts() if df.height else []


def _export_rows(exports: pl.DataFrame, name: str, table: str = "double_turn/training_exports"
                 ) -> tuple[list[dict[str, Any]], str, str | None]:
    """(records, source, why empty) of one JSONL export named in its exports table (`table`, lib/jsonl_exports.py)."""
    hit = exports.filter(pl.col("export") == name)
    source = f"{table}:{name}"
    if hit.is_empty():
        return [], source, f"{table} lists no export {name!r}"
    r = hit.row(0, named=True)
    if not r["written"]:
        return [], source, f"{table.split('/')[0]} export {name} not written ({r['reason']})"
    return jsonl_records(r["path"]), r["path"], None


def _lm(params: Params, job: LMJob, why_empty: str | None = None, identical: list[int] | None = None) -> dict:
    """Train one job; an empty export says why, and pairs left out for chosen == rejected are named. A row whose
    prompt is not in the template the model will record fails the asset, naming the row (the export was built
    with other params: rebuild it)."""
    template = TrainedTemplate.from_record(job.template, f"training/{job.name}") if job.template else None
    for i, row in enumerate(job.rows if template else [], start=1):
        why = template.mismatch(row["prompt"])
        if why:
            raise InputFileError(job.data_asset, f"training row {i}: {why}: not the {template.name} template "
                                 f"training/{job.name} records; rebuild the export with the current params",
                                 field="prompt")
    row = train_lm(job, params.training.for_model(job.name), models_root())
    if why_empty and row["status"] == "skipped_no_data":
        row["reason"] = why_empty
    elif identical:
        note = f"left out {len(identical)} pair(s) whose chosen == rejected (records {identical[:10]})"
        row["reason"] = f"{row['reason']}; {note}" if row["reason"] else note
    return row


def build(params: Params) -> dg.Definitions:
    """The assets of the models in training.models (clarilm_dpo reads clarilm_sft when both are on)."""
    enabled = set(params.training.models)
    asset = group_asset(GROUP)
    assets: list[Any] = []

    if "clarilm_sft" in enabled:
        @asset(ins=upstream("annotations/sft_dataset"))
        def clarilm_sft(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        sft_dataset: pl.DataFrame) -> pl.DataFrame:
            """ClariLM SFT: LoRA on (q, r+) in the 'Need clarification' template (completion-only loss)."""
            rows = trl_sft_rows(_frame_records(sft_dataset, ("messages",)), "annotations/sft_dataset")
            job = LMJob("clarilm_sft", "sft", rows, "annotations/sft_dataset",
                        template=model_template("clarilm_sft", params).record())
            return _emit(context, _table([_lm(params, job)]))
        assets.append(clarilm_sft)

    if "clarilm_dpo" in enabled:
        assets.append(_clarilm_dpo_asset(asset, after_sft="clarilm_sft" in enabled))
    assets.extend(_clarilm_sft_baselines(asset, enabled))

    if "double_turn_sft" in enabled:
        @asset(ins=upstream("double_turn/training_exports"))
        def double_turn_sft(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                            training_exports: pl.DataFrame) -> pl.DataFrame:
            """Clarify-or-Direct SFT on the double_turn sft_dataset export (the SFT-stage queries' clarifying
            questions and direct answers): the model both double_turn DPO models continue (paper §4)."""
            records, source, why = _export_rows(training_exports, "sft_dataset")
            job = LMJob("double_turn_sft", "sft", trl_sft_rows(records, source), "double_turn/sft_dataset",
                        template=model_template("double_turn_sft", params).record())
            return _emit(context, _table([_lm(params, job, why)]))
        assets.append(double_turn_sft)

    from dagster_project.defs.training import double_turn_dpo  # it builds on this module's helpers

    assets.extend(double_turn_dpo.assets(asset, enabled))

    if "intents_tuned" in enabled:
        @asset(ins=upstream("intents/training_conversations"))
        def intents_tuned(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                          training_conversations: pl.DataFrame) -> pl.DataFrame:
            """Instruction-tuning on the SDRS-filtered conversations (every assistant turn a completion); with
            intents.sweep_train also one model per intents.sweep_percentiles cut (intents_tuned_p<pct>)."""
            src = "intents/training_conversations"
            sets = {"intents_tuned": kept_messages(training_conversations)}
            if params.intents.sweep_train:
                for p in params.intents.sweep_percentiles:
                    sets[f"intents_tuned_{percentile_tag(p)}"] = intents_at_percentile(
                        training_conversations, p, params.intents.require_correct)
            template = model_template("intents_tuned", params).record()
            return _emit(context, _table([_lm(params, LMJob(n, "sft", trl_sft_rows(recs, src), src, template=template))
                                          for n, recs in sets.items()]))
        assets.append(intents_tuned)

    if "fm_log" in enabled:
        @asset(ins=upstream("logs/log_clarifications"))
        def fm_log(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                   log_clarifications: pl.DataFrame) -> pl.DataFrame:
            """ClariLM FM-LOG (§3.2.2): SFT on the kept log-mined (q_i -> f, c) pairs plus the extraction prompts'
            positive demonstrations, in the FM-LOG prompt with facets.log_demos log demonstrations (as the facets
            group asks it). Read at run time by the facets group when llm.roles["extractor:fm_log"] names it."""
            log_pairs = fm_log_training_pairs(log_clarifications)
            pairs = training_pairs(log_pairs)
            rows = sft_rows(pairs, log_pairs, params.facets.log_demos, params.facets.seed)
            context.add_output_metadata({"log_pairs": int((pairs["origin"] == "log").sum()),
                                         "shipped_pairs": int((pairs["origin"] == "shipped").sum())})
            job = LMJob("fm_log", "sft", rows, "logs/log_clarifications",
                        template=model_template("fm_log", params).record())
            return _emit(context, _table([_lm(params, job)]))
        assets.append(fm_log)

    if "reranker_finetuned" in enabled:
        assets.extend(_reranker_assets(asset))
    if "reranker_generative" in enabled:
        assets.append(_yes_no_asset(asset))
    return dg.Definitions(assets=assets)


CLARILM_BASELINES = {  # model -> the annotations exports it reads
    "clarilm_sft_external": ("annotations/sft_external_dataset",),
    "clarilm_sft_ql": ("annotations/sft_dataset",),
    "clarilm_sft_full": ("annotations/sft_dataset", "annotations/sft_external_dataset"),
}


def _clarilm_sft_baselines(asset: Any, enabled: set[str]) -> list[Any]:
    """ClariLM Table 2's SFT baselines: clarilm_sft's recipe and template on other data (sft_baselines.baseline_rows);
    training.per_model.clarilm_sft's settings apply to them too."""
    return [_clarilm_baseline_asset(asset, name, refs) for name, refs in CLARILM_BASELINES.items() if name in enabled]


def _clarilm_baseline_asset(asset: Any, name: str, refs: tuple[str, ...]) -> Any:
    @asset(name=name, ins=upstream(*refs), description=baseline_rows.__doc__)
    def _baseline(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                  **exports: pl.DataFrame) -> pl.DataFrame:
        source = "+".join(refs)
        rows = trl_sft_rows(baseline_rows(name, exports.get("sft_dataset"), exports.get("sft_external_dataset")),
                            source)
        job = LMJob(name, "sft", rows, source, template=model_template(name, params).record())
        return _emit(context, _table([_lm(params, job)]))
    return _baseline


def sft_stage_missing(sft: pl.DataFrame, sft_name: str, dpo_name: str) -> str | None:
    """Why a DPO model that continues an SFT model cannot be trained (the SFT stage built no model), else None:
    the chain is then skipped, never silently trained from the base."""
    r = sft.row(0, named=True) if sft.height else {"status": "missing", "reason": "no row"}
    if r["status"] in ("trained", "skipped_unchanged"):
        return None
    return (f"{dpo_name} continues {sft_name}, which built no model ({r['status']}: {r['reason']}); "
            f"not trained from the base instead")


def _clarilm_dpo(context: dg.AssetExecutionContext, params: Params, dpo_dataset: pl.DataFrame,
                 clarilm_sft: pl.DataFrame | None) -> pl.DataFrame:
    rows, same = trl_dpo_rows(_frame_records(dpo_dataset, ("prompt", "chosen", "rejected")), "annotations/dpo_dataset")
    init = None
    if clarilm_sft is not None:
        why = sft_stage_missing(clarilm_sft, "clarilm_sft", "clarilm_dpo")
        if why:
            context.log.warning(why)
            return _emit(context, _table([result_row("clarilm_dpo", "dpo", "skipped_no_data", "annotations/dpo_dataset",
                                                     len(rows), why)]))
        init = models_root() / "clarilm_sft" / ADAPTER
    job = LMJob("clarilm_dpo", "dpo", rows, "annotations/dpo_dataset", init,
                template=model_template("clarilm_dpo", params).record())
    return _emit(context, _table([_lm(params, job, identical=same)]))


def _clarilm_dpo_asset(asset: Any, after_sft: bool) -> Any:
    """ClariLM DPO on the three preference types (beta 0.1 in the paper). After clarilm_sft when that model is
    built: its adapter is merged into the base first and recorded as init_adapter; else from the base."""
    doc = _clarilm_dpo_asset.__doc__
    if after_sft:
        @asset(name="clarilm_dpo", description=doc, ins=upstream("annotations/dpo_dataset", "training/clarilm_sft"))
        def clarilm_dpo(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        dpo_dataset: pl.DataFrame, clarilm_sft: pl.DataFrame) -> pl.DataFrame:
            return _clarilm_dpo(context, params, dpo_dataset, clarilm_sft)
    else:
        @asset(name="clarilm_dpo", description=doc, ins=upstream("annotations/dpo_dataset"))
        def clarilm_dpo(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                        dpo_dataset: pl.DataFrame) -> pl.DataFrame:
            return _clarilm_dpo(context, params, dpo_dataset, None)
    return clarilm_dpo


def _reranker_assets(asset: Any) -> list[Any]:
    from dagster_project.training.reranker_training import NAME, train_reranker

    @asset(name=NAME, ins=upstream("retrieval/reranker_training", "retrieval/documents"))
    def reranker_finetuned(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                           reranker_training: pl.DataFrame, documents: pl.DataFrame) -> pl.DataFrame:
        """MiniLM bi-encoder fine-tuned on the train facets' (query, positive, hard BM25 negative) triplets."""
        texts = _doc_texts(documents)
        rows = reranker_triplets(reranker_training, texts)
        return _emit(context, _table([train_reranker(rows, params.training, models_root(),
                                                     "retrieval/reranker_training", params.embedder.model)]))

    @asset(ins=upstream("training/reranker_finetuned", "retrieval/reranker_training", "retrieval/documents"))
    def reranker_eval(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                      reranker_finetuned: pl.DataFrame, reranker_training: pl.DataFrame,
                      documents: pl.DataFrame) -> pl.DataFrame:
        """Base vs fine-tuned MiniLM re-ranking each held-out (test-facet) query's candidates (its relevant
        document + BM25 negatives): MRR, P@k, nDCG@k by the retrieval group's trec_eval metrics."""
        from dagster_project.llm.embedder import encode

        texts = _doc_texts(documents)
        qrels, queries, cands = rerank_candidates(reranker_training, texts, "test")
        folder = reranker_finetuned["folder"][0]
        rankers = {"minilm_base": "all-MiniLM-L6-v2", **({"minilm_finetuned": folder} if folder else {})}
        rows = []
        for ranker, model in rankers.items():
            if not qrels:
                rows.append({"ranker": ranker, "split": "test", "n_queries": 0, "status": "skipped_no_data",
                             "reason": "no kept test-split rows in retrieval/reranker_training"})
                continue
            ranked = rank_by_embedding(lambda t, m=model: encode(t, m), queries, cands, texts)
            per_q = ranking_metrics(qrels, ranked, params.retrieval.ks)
            means = {c: float(per_q[c].mean()) for c in per_q.columns if c != "query_id"}
            rows.append({"ranker": ranker, "split": "test", "n_queries": per_q.height, "status": "ok",
                         "reason": None, **means})
        ks = params.retrieval.ks
        metric_cols = dict.fromkeys(["mrr", *[f"p_at_{k}" for k in ks], *[f"ndcg_at_{k}" for k in ks]], pl.Float64)
        out = pl.DataFrame(rows, schema=EVAL_SCHEMA | metric_cols)
        context.add_output_metadata({"queries": len(qrels), **{
            f"{r['ranker']}_mrr": r["mrr"] for r in rows if r.get("mrr") is not None}})
        return out

    return [reranker_finetuned, reranker_eval]


def _yes_no_asset(asset: Any) -> Any:
    from dagster_project.core.retrieval.yes_no import sft_rows

    @asset(ins=upstream("retrieval/reranker_training", "retrieval/documents", "retrieval/inferred_queries"))
    def reranker_generative(context: dg.AssetExecutionContext, params: dg.ResourceParam[Params],
                            reranker_training: pl.DataFrame, documents: pl.DataFrame,
                            inferred_queries: pl.DataFrame) -> pl.DataFrame:
        """ClariMM's trained re-ranker, text only: LoRA SFT of the base model on the train facets' (conversation,
        query, document) prompts, "yes" for the relevant document and "no" for BM25 negatives; the headlines group
        scores it (and its untrained base) by P(yes) on the test facets."""
        y = params.training.yes_no_reranker
        conversations = dict(inferred_queries.select("query_id", "conversation").iter_rows())
        rows = sft_rows(reranker_training, _doc_texts(documents), conversations, y.negatives, y.doc_chars)
        job = LMJob("reranker_generative", "sft", rows, "retrieval/reranker_training",
                    template=model_template("reranker_generative", params).record())
        return _emit(context, _table([_lm(params, job)]))

    return reranker_generative


def _doc_texts(documents: pl.DataFrame) -> dict[str, str]:
    from dagster_project.core.retrieval.documents import document_text

    return {d: document_text(t, x) for d, t, x in documents.select("doc_id", "title", "text").iter_rows()}
