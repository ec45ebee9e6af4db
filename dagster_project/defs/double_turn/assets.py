"""Group `double_turn`: double-turn preference labelling and answer-set F1 evaluation (Zhang, Knox & Choi).

qa_sets (+ qa_sets_rejected) -> feasible_answers -> clarify_sft
qa_sets -> candidate_responses -> user_simulations -> double_turn_outcomes -> preference_pairs
                               -> single_turn_scores -----------------------/
qa_sets -> eval_interactions -> answer_set_eval
TRL-ready JSONL exports are written next to the Parquet files, under assets/double_turn/exports/.
"""

import json
import os
import tempfile
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core import double_turn as dt
from dagster_project.core.double_turn.qa_import import qa_tables, read_input, select_queries
from dagster_project.core.shared.tables import markdown_table
from dagster_project.llm.client import LLMResource
from dagster_project.resources.params import ParamsResource
from dagster_project.lib.warehouse import ASSETS_DIR

GROUP = "double_turn"


def _key(name: str) -> list[str]:
    return [GROUP, name]


def _in(name: str) -> dg.AssetIn:
    return dg.AssetIn(key=_key(name))


def export_dir() -> Path:
    return Path(ASSETS_DIR) / GROUP / "exports"


def write_jsonl(name: str, records: list[dict]) -> Path:
    """Write records as JSON lines atomically (temp file + rename) under assets/double_turn/exports/."""
    folder = export_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def _usage(llm: LLMResource, role: str, results: list, prefix: str | None = None) -> dict:
    return {f"{prefix or role}_{k}": v for k, v in llm.usage(role, results).items()}


def _per_query(results: list, n_queries: int) -> dict:
    """LLM samples (a request with n samples counts n) per query of this asset, all roles together."""
    samples = sum(max(len(r.texts), 1) for r in results)
    return {"llm_samples_per_query": round(samples / n_queries, 2) if n_queries else 0.0}


def _selected(qa_sets: pl.DataFrame, use: str) -> pl.DataFrame:
    return qa_sets.filter(pl.col(f"selected_{use}"))


@dg.multi_asset(
    group_name=GROUP,
    outs={"qa_sets": dg.AssetOut(key=_key("qa_sets"), kinds={"polars"},
                                 description="One row per query with its interpretations (answers = alias lists)."),
          "qa_sets_rejected": dg.AssetOut(key=_key("qa_sets_rejected"), kinds={"polars"},
                                          description="Quarantined input records: file, record, field, reason.")},
)
def qa_sets(context: dg.AssetExecutionContext, params: ParamsResource):
    """Import every file in double_turn.inputs; mark the queries each use (train / eval) selects."""
    cfg = params.load().double_turn
    results = [(read_input(i.path, i.format, i.answers_are_aliases), i.split) for i in cfg.inputs]
    qa, rejected = qa_tables(results)
    qa = select_queries(qa, cfg.max_queries, cfg.seed)
    meta = {"records_read": sum(r.n_read for r, _ in results), "queries": qa.height, "rejected": rejected.height,
            "ambiguous": int(qa["is_ambiguous"].sum()), "selected_train": int(qa["selected_train"].sum()),
            "selected_eval": int(qa["selected_eval"].sum())}
    context.log.info(f"double_turn inputs: {meta}")
    yield dg.Output(qa, output_name="qa_sets", metadata=meta)
    yield dg.Output(rejected, output_name="qa_sets_rejected",
                    metadata={"rejected": rejected.height,
                              "by_file": dg.MetadataValue.json(
                                  {r.path: len(r.rejected) for r, _ in results})})


@dg.asset(key=_key("feasible_answers"), group_name=GROUP, kinds={"polars"}, ins={"qa_sets": _in("qa_sets")})
def feasible_answers(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                     qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Y_human from the annotations and Y_model from few-shot answerer samples (greedy + T=1.0 per round)."""
    cfg = params.load().double_turn
    queries = _selected(qa_sets, "train")
    plan, reqs = dt.feasible_answer_requests(queries, dt.shot_pool(qa_sets), cfg.rounds, cfg.n_shots,
                                             cfg.sample_temperature, cfg.seed, cfg.answer_max_tokens)
    results = llm.chat("answerer", reqs, context)
    out = dt.build_feasible_answers(queries, plan, reqs, results, cfg.sft_min_answers)
    context.add_output_metadata({
        **_usage(llm, "answerer", results), **_per_query(results, out.height), "queries": out.height,
        "model_filter_passed": int(out["model_filter_passed"].sum()),
        "filtered_no_gold_match": int((~out["model_filter_passed"]).sum()),
        "mean_model_answers": round(float(out["n_model_answers"].mean() or 0), 2),
    })
    return out


@dg.asset(key=_key("clarify_sft"), group_name=GROUP, kinds={"polars"}, ins={"feasible_answers": _in("feasible_answers")})
def clarify_sft(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                feasible_answers: pl.DataFrame) -> pl.DataFrame:
    """(x, q) and (x, q, a_i, y_i) SFT rows from the generator; TRL `messages` exports in exports/."""
    cfg = params.load().double_turn
    plan, reqs = dt.sft_requests(feasible_answers, cfg.generator_max_tokens)
    results = llm.chat("generator", reqs, context)
    out = dt.build_clarify_sft(plan, reqs, results)
    files = {name: write_jsonl(name, recs) for name, recs in dt.sft_exports(out).items()}
    context.add_output_metadata({
        **_usage(llm, "generator", results), **_per_query(results, feasible_answers.height),
        "xq_rows": out.filter(pl.col("row_type") == "clarify").height,
        "xqay_rows": out.filter(pl.col("row_type") == "answer").height,
        "kept": int(out["kept"].sum()),
        "by_source": dg.MetadataValue.json(dict(out.group_by("answer_source").len().iter_rows())),
        "exports": dg.MetadataValue.json({n: str(p) for n, p in files.items()}),
    })
    return out


@dg.asset(key=_key("candidate_responses"), group_name=GROUP, kinds={"polars"}, ins={"qa_sets": _in("qa_sets")})
def candidate_responses(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                        qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Per query: clarifying questions (clarifier, 1 greedy + n sampled), the greedy direct answer and the
    Direct-Ans sampled pool (answerer)."""
    cfg = params.load().double_turn
    queries = _selected(qa_sets, "train")
    c_plan, c_reqs, d_plan, d_reqs = dt.candidate_requests(
        queries, dt.shot_pool(qa_sets), n_clarify_sampled=cfg.n_clarify_sampled,
        clarify_temperature=cfg.clarify_temperature, n_direct_samples=cfg.n_direct_samples,
        sample_temperature=cfg.sample_temperature, n_shots=cfg.n_shots, seed=cfg.seed,
        max_tokens=cfg.answer_max_tokens)
    c_res = llm.chat("clarifier", c_reqs, context)
    d_res = llm.chat("answerer", d_reqs, context)
    out = dt.build_candidates(queries, c_plan, c_reqs, c_res, d_plan, d_reqs, d_res)
    context.add_output_metadata({
        **_usage(llm, "clarifier", c_res), **_usage(llm, "answerer", d_res),
        **_per_query(c_res + d_res, queries.height), "queries": queries.height, "in_pairs": int(out["in_pairs"].sum()),
        "by_kind": dg.MetadataValue.json(dict(out.group_by("kind").len().iter_rows())),
    })
    return out


@dg.asset(key=_key("user_simulations"), group_name=GROUP, kinds={"polars"},
          ins={"qa_sets": _in("qa_sets"), "candidate_responses": _in("candidate_responses")})
def user_simulations(context: dg.AssetExecutionContext, llm: LLMResource, qa_sets: pl.DataFrame,
                     candidate_responses: pl.DataFrame) -> pl.DataFrame:
    """psi(x, q, y_i) -> a_i for every clarifying candidate and user; leaks and abstains are marked."""
    items = dt.user_items(candidate_responses, qa_sets)
    reqs = dt.simulation_requests(items)
    results = llm.chat("user_simulator", reqs, context)
    out = dt.build_simulations(items, reqs, results)
    context.add_output_metadata({
        **_usage(llm, "user_simulator", results), **_per_query(results, candidate_responses["query_id"].n_unique()),
        "simulations": out.height,
        "abstained": int(out["abstained"].sum()),
        "abstain_reasons": dg.MetadataValue.json(
            {str(k): v for k, v in out.group_by("abstain_reason").len().iter_rows()}),
    })
    return out


@dg.asset(key=_key("double_turn_outcomes"), group_name=GROUP, kinds={"polars"},
          ins={"qa_sets": _in("qa_sets"), "candidate_responses": _in("candidate_responses"),
               "user_simulations": _in("user_simulations")})
def double_turn_outcomes(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                         qa_sets: pl.DataFrame, candidate_responses: pl.DataFrame,
                         user_simulations: pl.DataFrame) -> pl.DataFrame:
    """The answerer's answer after each non-abstained user reply; EM per user; score(q) = mean over users."""
    cfg = params.load().double_turn
    qtext = dict(zip(qa_sets["query_id"], qa_sets["question"]))
    items = [{"sim_id": s["sim_id"], "question": qtext[s["query_id"]],
              "clarifying_question": s["clarifying_question"], "reply": s["reply"]}
             for s in user_simulations.filter(~pl.col("abstained")).iter_rows(named=True)]
    reqs = dt.final_answer_requests(items, cfg.answer_max_tokens)
    results = llm.chat("answerer", reqs, context)
    out = dt.build_outcomes(qa_sets, candidate_responses, user_simulations, items, reqs, results)
    scores = out.group_by("candidate_id", "kind").agg(pl.col("candidate_score").first())
    context.add_output_metadata({
        **_usage(llm, "answerer", results), **_per_query(results, candidate_responses["query_id"].n_unique()),
        "outcomes": out.height,
        "mean_score_clarify": round(float(scores.filter(pl.col("kind") == "clarify")["candidate_score"].mean() or 0), 3),
        "mean_score_direct": round(float(scores.filter(pl.col("kind") == "direct")["candidate_score"].mean() or 0), 3),
    })
    return out


@dg.asset(key=_key("single_turn_scores"), group_name=GROUP, kinds={"polars"},
          ins={"candidate_responses": _in("candidate_responses")})
def single_turn_scores(context: dg.AssetExecutionContext, llm: LLMResource,
                       candidate_responses: pl.DataFrame) -> pl.DataFrame:
    """The standard single-turn scheme: the judge scores each candidate seeing only the query (1-10)."""
    cands = candidate_responses.filter(pl.col("in_pairs"))
    reqs = dt.judge_requests(cands)
    results = llm.chat("judge", reqs, context)
    out = dt.build_single_turn_scores(cands, reqs, results)
    context.add_output_metadata({**_usage(llm, "judge", results), **_per_query(results, cands["query_id"].n_unique()),
                                 "scored": int(out["judge_score"].is_not_null().sum())})
    return out


@dg.asset(key=_key("preference_pairs"), group_name=GROUP, kinds={"polars"},
          ins={"candidate_responses": _in("candidate_responses"),
               "double_turn_outcomes": _in("double_turn_outcomes"),
               "single_turn_scores": _in("single_turn_scores")})
def preference_pairs(context: dg.AssetExecutionContext, candidate_responses: pl.DataFrame,
                     double_turn_outcomes: pl.DataFrame, single_turn_scores: pl.DataFrame) -> pl.DataFrame:
    """All candidate pairs per query under both labelings (double_turn, single_turn); DPO exports."""
    cands = candidate_responses.filter(pl.col("in_pairs")).select("query_id", "question", "candidate_id", "kind",
                                                                  "text")
    dt_scores = double_turn_outcomes.group_by("candidate_id").agg(
        pl.when(pl.col("scored").all()).then(pl.col("candidate_score").first()).alias("score"))
    st_scores = single_turn_scores.select("candidate_id", pl.col("judge_score").alias("score"))
    out = pl.concat([
        dt.label_pairs(cands.join(dt_scores, on="candidate_id", how="left"), "double_turn", direct_wins_ties=True),
        dt.label_pairs(cands.join(st_scores, on="candidate_id", how="left"), "single_turn", direct_wins_ties=False),
    ])
    exports = {}
    for labeling, stem in (("double_turn", "dpo_dataset"), ("single_turn", "dpo_single_turn")):
        sub = out.filter(pl.col("labeling") == labeling)
        exports[stem] = write_jsonl(stem, dt.dpo_records(sub))
        exports[f"{stem}_clarify_only"] = write_jsonl(
            f"{stem}_clarify_only", dt.dpo_records(sub.filter(pl.col("pair_type") == "clarify_vs_clarify")))
    summary = out.group_by("labeling", "reason").len().sort("labeling", "reason")
    context.add_output_metadata({
        "pairs_kept": dg.MetadataValue.json(
            {lab: int(g["kept"].sum()) for (lab,), g in out.group_by(["labeling"])}),
        "reasons": dg.MetadataValue.md(markdown_table(summary)),
        "exports": dg.MetadataValue.json({n: str(p) for n, p in exports.items()}),
    })
    return out


@dg.asset(key=_key("eval_interactions"), group_name=GROUP, kinds={"polars"}, ins={"qa_sets": _in("qa_sets")})
def eval_interactions(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                      qa_sets: pl.DataFrame) -> pl.DataFrame:
    """Every subject x system x eval query: turn 2, simulated users' replies, answers after clarifying, F1."""
    p = params.load()
    cfg = p.double_turn
    subjects = cfg.subjects if cfg.subjects is not None else list(p.llm.subjects)
    unknown = sorted(set(subjects) - set(p.llm.subjects))
    if unknown:
        raise ValueError(f"double_turn.subjects: {unknown} not in llm.subjects {sorted(p.llm.subjects)}")
    queries = _selected(qa_sets, "eval")
    episodes, meta, all_results = [], {}, []
    for s in subjects:
        plan, reqs = dt.subject_requests(queries, cfg.n_direct_samples, cfg.sample_temperature, cfg.seed,
                                         cfg.subject_max_tokens, cfg.subject_output)
        res = llm.chat(f"subject:{s}", reqs, context)
        all_results += res
        episodes += dt.eval_episodes(qa_sets, s, plan, reqs, res)
        meta |= _usage(llm, f"subject:{s}", res, prefix=f"{s}_turn2")
    items = dt.episode_user_items(episodes)
    sim_res = llm.chat("user_simulator", dt.simulation_requests(items), context)
    all_results += sim_res
    sims = [dt.parse_simulation(r, it["aliases"]) for it, r in zip(items, sim_res, strict=True)]
    meta |= _usage(llm, "user_simulator", sim_res)
    answered = [j for j, sim in enumerate(sims) if not sim["abstained"]]
    finals: list = [None] * len(items)
    for role in sorted({_final_role(cfg.final_answerer, episodes[items[j]["episode"]]["subject"]) for j in answered}):
        js = [j for j in answered if _final_role(cfg.final_answerer, episodes[items[j]["episode"]]["subject"]) == role]
        fin_items = [{**items[j], "reply": sims[j]["reply"]} for j in js]
        fin_res = llm.chat(role, dt.final_answer_requests(fin_items, cfg.answer_max_tokens), context)
        all_results += fin_res
        for j, r in zip(js, fin_res, strict=True):
            finals[j] = (*dt.parse_answer(r.text, r.error), r.text)
        meta |= _usage(llm, role, fin_res, prefix=f"final_{role.replace(':', '_')}")
    out = dt.score_episodes(episodes, items, sims, finals)
    context.add_output_metadata(meta | _per_query(all_results, queries.height)
                                | {"episodes": out.height, "user_simulations": len(items), "eval_queries": queries.height})
    return out


def _final_role(final_answerer: str, subject: str) -> str:
    return "answerer" if final_answerer == "answerer" else f"subject:{subject}"


@dg.asset(key=_key("answer_set_eval"), group_name=GROUP, kinds={"polars"},
          ins={"eval_interactions": _in("eval_interactions")})
def answer_set_eval(context: dg.AssetExecutionContext, params: ParamsResource,
                    eval_interactions: pl.DataFrame) -> pl.DataFrame:
    """Table 1 (avg turns, answer-set F1 Unambiguous / Ambiguous / Total) and Table 4 (DA%, DA accuracy,
    random baseline at the same DA%) per subject model."""
    cfg = params.load().double_turn
    out = dt.answer_set_table(eval_interactions, cfg.random_repeats, cfg.seed)
    view = out.select("subject", "label", "avg_turns", "f1_unambiguous", "f1_ambiguous", "f1_total",
                      "da_rate", "da_accuracy").with_columns(pl.col(pl.Float64).round(3).cast(pl.Utf8))
    context.add_output_metadata({"table": dg.MetadataValue.md(markdown_table(view))})
    return out
