"""Evaluation group with a scripted LLM: every method and ablation, partitions, judge, tables, report, importers."""

import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend, schema_responder, scripted_llm

from dagster_project.runs.group_runs import group_stages, materialize_group
from dagster_project.config import METHOD_NAMES, ParamsError, load_params, parse_params
from dagster_project.defs.benchmark import assets as benchmark
from dagster_project.defs.evaluation import assets as evaluation
from dagster_project.defs.quality.checks import build_checks
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.lib.warehouse import read_asset

REPO = Path(__file__).resolve().parents[2]
SCRIPTED: dict[str, ScriptedBackend] = {}


class HashEmbedder(dg.ConfigurableResource):
    """Equal texts -> equal unit vectors; texts starting with 'varied' point in orthogonal directions."""

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(texts) + 1), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, i if t.startswith("varied") else -1] = 1.0
        return out


def eval_responder(job, idx):
    """Plausible replies for every evaluation prompt; the benchmark and the base subject use schema_responder."""
    props = (job.json_schema or {}).get("properties", {})
    prompt = job.messages[-1]["content"]
    if "request" in props:  # ClarifyAgent Input
        return json.dumps({"request": "plan a trip", "latest": prompt.splitlines()[-1][:80]})
    if "slots" in props:  # Perceiver: destination unfilled at first, then filled
        status = "unfilled" if "(no slots tracked yet)" in prompt else "filled"
        return json.dumps({"slots": [{"name": "Destination", "value": "" if status == "unfilled" else "Porto",
                                      "status": status, "required": True}]})
    if "persona" in props:
        return json.dumps({"persona": "partial_vague", "reason": "vague"})
    if "action" in props:  # Planner: follow RSC
        return json.dumps({"action": "answer" if "(RSC): yes" in prompt else "clarify",
                           "target_slot": "destination", "reason": "r"})
    if "text" in props:
        return json.dumps({"text": "Where do you want to go?" if "clarifying question" in prompt else "Here it is."})
    if "ambiguity_type" in props:
        return json.dumps({"ambiguity_type": "lexical", "reasoning": "two senses", "decision": "clarify",
                           "response": "Which sense do you mean?"})
    if "interpretation" in props:  # the same interpretation every time -> settled -> answer
        return json.dumps({"interpretation": "a trip to Porto", "clarifying_question": "Which city?"})
    if "better" in props:  # a position-biased judge: always the first slot
        return json.dumps({"better": "first"})
    if "score" in props:
        return json.dumps({"score": 3})
    system = job.messages[0]["content"]
    if not props and "output module" in system:  # the agent's Output module in free text (the default format)
        return ("The clarifying question is: Where do you want to go?" if "Ask the user" in prompt
                else "The answer is: Here it is.")
    if not props and "best settle" in system:  # Intent-Sim's question
        return "The clarifying question is: Where do you want to go?"
    if not props and "You play the user" in system:  # Intent-Sim's simulated user: always the same intent
        return "Porto, in May."
    if not props and "answer it now" in system:  # Intent-Sim's answer when the intents agree
        return "The answer is: Porto in May is lovely."
    if not props and "Ambiguity types (one or more" in system:  # the original AT-CoT in free text
        return "Ambiguity types: specify, semantic\nWhen?\nThe clarifying question is: Which dates?"
    if not props and "Ambiguity type" in system:  # AT-CoT (16 subtypes) in free text
        return "Ambiguity type: lexical\nTwo senses.\nThe clarifying question is: Which sense do you mean?"
    if not props and "Interpretation" in system:  # Intent-Sim samples in free text
        return "Interpretation: a trip to Porto\nThe clarifying question is: Which city?"
    if "Think it through step by step" in prompt:
        return "The user is vague.\nThe clarifying question is: which one do you mean?"
    return schema_responder(job, idx)


def _params(tmp_path, **evaluation_overrides) -> str:
    data = {
        "llm": {"cache_path": str(tmp_path / "cache.sqlite")},
        "benchmark": {"n_per_subtype": 1, "subtypes": ["lexical"]},
        "quality": {"max_error_rate": 0.2},
        "evaluation": {"methods": list(METHOD_NAMES), "bertscore": False, "vote_k": 3, "intent_k": 3,
                       "judge_per_subtype": 2, "judge_pairs": [["clarify_agent", "base"]], **evaluation_overrides},
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _defs(params_path: str) -> dg.Definitions:
    params = load_params(params_path)
    assets = [*dg.load_assets_from_modules([benchmark]), *evaluation.build(params).assets]
    keys = {k for a in assets for k in a.keys}
    return dg.Definitions(assets=assets, asset_checks=build_checks(keys), executor=dg.in_process_executor, resources={
        "io_manager": WarehouseIOManager(), "params": params,
        "llm": scripted_llm(params, SCRIPTED["backend"]), "embedder": HashEmbedder()})


def _build(tmp_path, monkeypatch, responder=eval_responder, partitions=None, **overrides):
    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(responder)
    defs = _defs(_params(tmp_path, **overrides))
    instance = dg.DagsterInstance.ephemeral()
    results = materialize_group(defs, "benchmark", instance)
    results += materialize_group(defs, "evaluation", instance, partitions)
    return results


def _checks(results):
    return {c.check_name: c.passed for r in results for c in r.get_asset_check_evaluations()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One scripted run of the whole evaluation group (11 methods x 1 subject), shared by the tests below."""
    tmp = tmp_path_factory.mktemp("eval")
    mp = pytest.MonkeyPatch()
    try:
        results = _build(tmp, mp)
        yield tmp, results
    finally:
        mp.undo()


def test_stages_run_upstream_then_partitions_then_tables(tmp_path):
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    defs = _defs(_params(tmp_path))
    stages = group_stages(defs, "evaluation")
    names = [[k.to_user_string() for k in keys] for _, keys in stages]
    assert names[0] == ["evaluation/external_dialogues", "evaluation/external_dialogues_rejected"]
    assert names[1] == ["evaluation/predictions"] and stages[1][0] is not None
    assert set(names[2]) == {"evaluation/judge_scores", "evaluation/pairwise_judgements", "evaluation/metric_tables",
                             "evaluation/method_comparison", "evaluation/trained_comparison", "evaluation/report"}
    keys = stages[1][0].get_partition_keys()
    assert len(keys) == len(METHOD_NAMES) and "base|smollm2" in keys


def test_every_method_materializes_its_partition(built):
    tmp, results = built
    assert results and all(r.success for r in results)
    checks = _checks(results)
    assert checks and all(checks.values()), checks
    files = sorted((tmp / "assets/evaluation/predictions").rglob("*.parquet"))
    assert [f.relative_to(tmp / "assets/evaluation/predictions").as_posix() for f in files] == sorted(
        f"method={m}/subject=smollm2/data.parquet" for m in METHOD_NAMES)
    d = pl.read_parquet(tmp / "assets/benchmark/persona_dialogues.parquet")
    p = read_asset(tmp / "assets", "evaluation", "predictions")
    assert p.height == len(METHOD_NAMES) * d.height == 11 * 16
    # the DuckDB view is the union of every partition
    with duckdb.connect(str(tmp / "assets/warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from evaluation.predictions").fetchone()[0] == p.height
        assert con.execute("select count(distinct method) from evaluation.predictions").fetchone()[0] == 11
    assert set(p["status"]) == {"ok"}


def test_decisions_and_calls_per_method(built):
    tmp, _ = built
    p = read_asset(tmp / "assets", "evaluation", "predictions")

    def rows(method):
        return {(r["dialogue_id"], r["turn"]): r for r in p.filter(pl.col("method") == method).to_dicts()}

    # base: the scripted subject asks on the first message only
    base = rows("base")
    assert {k[1]: r["action"] for k, r in base.items() if k[1] == 1} == {1: "clarify"}
    assert all(r["llm_calls"] == 1 for r in base.values())
    # majority vote: 3 samples, all agree with the base reply
    mv = rows("majority_vote")
    assert all(r["llm_calls"] == 3 and r["action"] == base[k]["action"] for k, r in mv.items())
    assert json.loads(next(iter(mv.values()))["trace"])["votes"]["abstain"] == 0
    # CoT: the final line decides
    assert {r["action"] for r in rows("cot").values()} == {"clarify"}
    # Intent-Sim (original): one question, 3 simulated answers of one intent -> entropy 0 -> answer (+1 call)
    isim = rows("intent_sim")
    assert {(r["action"], r["response"], r["llm_calls"]) for r in isim.values()} == {
        ("answer", "Porto in May is lovely.", 5)}
    assert json.loads(next(iter(isim.values()))["trace"])["entropy"] == 0
    # the earlier variant: identical interpretations -> similarity 1 >= tau -> answer, stating the interpretation
    interp = rows("intent_sim_interpretations")
    assert {r["action"] for r in interp.values()} == {"answer"}
    assert all(r["response"] == "Assuming you mean: a trip to Porto" for r in interp.values())
    assert json.loads(next(iter(interp.values()))["trace"])["similarity"] == pytest.approx(1.0)
    assert {json.loads(r["trace"])["ambiguity_type"] for r in rows("at_cot_subtypes").values()} == {"lexical"}
    assert {tuple(json.loads(r["trace"])["ambiguity_types"]) for r in rows("at_cot").values()} == {
        ("specify", "semantic")}
    # ClarifyAgent: destination unfilled on turn 1 (ask), filled afterwards (RSC -> answer)
    agent = rows("clarify_agent")
    for (did, turn), r in agent.items():
        assert r["llm_calls"] == (4 if turn == 1 else 5)  # no Forecaster before the user replied
        assert r["action"] == ("clarify" if turn == 1 else "answer"), (did, turn)
        assert r["rsc"] is (turn > 1)
        assert r["decided_by"] == "planner"
        slots = json.loads(r["slots"])
        assert [s["name"] for s in slots] == ["destination"]
    assert agent[next(k for k in agent if k[1] == 1)]["response"] == "Where do you want to go?"
    assert all(r["persona_forecast"] == ("partial_vague" if t > 1 else None) for (_, t), r in agent.items())
    # ablations: one module fewer each
    assert {r["llm_calls"] for (_, t), r in rows("clarify_agent_no_planner").items() if t > 1} == {4}
    assert {r["decided_by"] for r in rows("clarify_agent_no_planner").values()} == {"rule"}
    assert {r["rsc"] for r in rows("clarify_agent_no_perceiver").values()} == {None}
    assert {r["persona_forecast"] for r in rows("clarify_agent_no_forecaster").values()} == {None}
    assert {r["llm_calls"] for r in rows("clarify_agent_no_forecaster").values()} == {4}


def test_judge_tables_and_report(built):
    tmp, _ = built
    js = pl.read_parquet(tmp / "assets/evaluation/judge_scores.parquet")
    # clarify turns with a reference question: turn 1 of 6 dialogues + turn 2 of the 4 three-turn personas
    assert js.filter(pl.col("method") == "base").height == 10
    sampled = js.filter(pl.col("sampled"))
    assert sampled.group_by("method").len()["len"].to_list() == [2] * 11  # 2 per subtype, same items everywhere
    assert set(sampled.filter(pl.col("judged_by") == "judge")["score"]) == {3}
    # intent_sim answered every turn: 0 by the rubric, without a judge call
    assert set(sampled.filter(pl.col("method") == "intent_sim")["judged_by"]) == {"rule"}
    assert set(sampled.filter(pl.col("method") == "intent_sim")["score"]) == {0}
    pw = pl.read_parquet(tmp / "assets/evaluation/pairwise_judgements.parquet")
    # the judge always prefers the first slot: swapping positions turns every judged item into a tie
    judged = pw.filter(pl.col("judged_by") == "judge")
    assert judged.height and set(judged["outcome"]) == {"tie"}
    assert set(judged["verdict_ab"]) == set(judged["verdict_ba"]) == {"first"}

    m = pl.read_parquet(tmp / "assets/evaluation/metric_tables.parquet")
    assert set(m["breakdown"]) >= {"overall", "by_persona_turn", "by_subtype_turn"}
    cmp = pl.read_parquet(tmp / "assets/evaluation/method_comparison.parquet")
    assert set(cmp["scope"]) == {"turn_2", "all_turns"}
    assert cmp.filter(pl.col("scope") == "turn_2").height == 11
    agent = cmp.filter((pl.col("method") == "clarify_agent") & (pl.col("scope") == "all_turns")).row(0, named=True)
    # answers turns 2 and 3 of the four noisy personas; the six dialogues share one query, whose turn 1 counts once
    # (issue 27.4): right on turn 1 and the two turn-2 answers, of 16 - 6 + 1 = 11 independent turns
    assert (agent["n"], agent["n_independent"], agent["n_queries"]) == (16, 11, 1)
    assert agent["accuracy"] == pytest.approx(3 / 11)
    assert agent["calls_per_turn"] == pytest.approx((6 * 4 + 10 * 5) / 16)
    assert agent["judge_score"] is not None
    base = cmp.filter((pl.col("method") == "base") & (pl.col("scope") == "all_turns")).row(0, named=True)
    assert base["reference_method"] == "clarify_agent" and 0 <= base["p_ttest"] <= 1

    html = (tmp / "assets/evaluation/report/report.html").read_text()
    assert "data:image/png;base64," in html and "src=\"accuracy" not in html  # plots inlined
    md = (tmp / "assets/evaluation/report/report.md").read_text()
    for heading in ("Method x persona at turn 2", "Ablations", "Table 4 layout", "Judge score by subtype",
                    "Pairwise win / tie / lose", "Parse errors and invalid outputs"):
        assert heading in md, heading
    assert {p.name for p in (tmp / "assets/evaluation/report").glob("*.png")} >= {
        "accuracy_by_persona.png", "subtype_turn_heatmap.png", "judge_by_subtype.png", "calls_vs_accuracy.png"}


def test_batches_one_request_list_per_module_step(tmp_path, monkeypatch):
    """ClarifyAgent sends each module's requests for one turn number as one batch (perceiver + forecaster
    together), turn 1 of all dialogues before turn 2."""
    calls = []

    class Recording(ScriptedBackend):
        chunk_size = 1000

        def generate(self, jobs):
            calls.append([j.json_schema and sorted(j.json_schema["properties"])[0] for j in jobs])
            return super().generate(jobs)

    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = Recording(eval_responder)
    defs = _defs(_params(tmp_path, methods=["clarify_agent"], judge_pairs=[], judge_per_subtype=0))
    instance = dg.DagsterInstance.ephemeral()
    materialize_group(defs, "benchmark", instance)
    calls.clear()
    results = materialize_group(defs, "evaluation", instance)
    assert all(r.success for r in results)
    # per turn: input, perceiver (+ forecaster from turn 2), planner, output (free text: no schema). Turn 1 is the
    # one query shared by the six dialogues: each module sends it once (issue 27.4); identical requests of later
    # turns are sent once too
    assert len(calls) == 12 and [len(c) for c in calls[:4]] == [1, 1, 1, 1]
    assert [sorted(set(c), key=str) for c in calls] == [["latest"], ["slots"], ["action"], [None]] + [
        ["latest"], ["persona", "slots"], ["action"], [None]] * 2
    assert all(len(c) <= 6 for c in calls[4:8]) and all(len(c) <= 4 for c in calls[8:])
    assert set(calls[5]) == {"persona", "slots"}


def test_sample_of_dialogues_is_the_same_for_every_method(tmp_path, monkeypatch):
    results = _build(tmp_path, monkeypatch, max_dialogues=3, methods=["base", "clarify_agent"], judge_pairs=[])
    assert all(r.success for r in results)
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    by_method = {m: set(g["dialogue_id"]) for (m,), g in p.group_by(["method"])}
    assert len(by_method["base"]) == 3 and by_method["base"] == by_method["clarify_agent"]
    assert p.filter(pl.col("method") == "base")["persona"].n_unique() == 3  # spread over personas


def test_one_partition_only(tmp_path, monkeypatch):
    results = _build(tmp_path, monkeypatch, partitions=["cot|smollm2"], judge_pairs=[])
    assert all(r.success for r in results)
    files = list((tmp_path / "assets/evaluation/predictions").rglob("*.parquet"))
    assert [f.relative_to(tmp_path / "assets/evaluation/predictions").as_posix() for f in files] == [
        "method=cot/subject=smollm2/data.parquet"]
    m = pl.read_parquet(tmp_path / "assets/evaluation/metric_tables.parquet")
    assert set(m["method"]) == {"cot"}  # tables read the partitions that exist


def test_external_datasets_run_through_every_method(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(REPO / "data/external", data)
    external = {"clamber": {"format": "clamber", "path": str(data / "clamber_sample.jsonl")},
                "mine": {"format": "generic", "path": str(data / "generic_sample.jsonl")}}
    results = _build(tmp_path, monkeypatch, methods=["base", "clarify_agent"], datasets=["clamber", "mine"],
                     external=external, judge_pairs=[])
    assert all(r.success for r in results), _checks(results)
    assert all(_checks(results).values()), _checks(results)
    t = pl.read_parquet(tmp_path / "assets/evaluation/external_dialogues.parquet")
    rej = pl.read_parquet(tmp_path / "assets/evaluation/external_dialogues_rejected.parquet")
    assert t.filter(pl.col("dataset") == "clamber").height == 4 and t.filter(pl.col("dataset") == "mine").height == 6
    assert rej.columns == ["file", "record", "field", "reason", "raw"]
    from_file = {name: rej.filter(pl.col("file").str.ends_with(name)).height
                 for name in ("clamber_sample.jsonl", "generic_sample.jsonl")}
    assert from_file == {"clamber_sample.jsonl": 4, "generic_sample.jsonl": 3}
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert set(p["dataset"]) == {"clamber", "mine"}  # clarifymt not listed in datasets
    assert p.height == 2 * 10
    m = pl.read_parquet(tmp_path / "assets/evaluation/metric_tables.parquet")
    overall = m.filter(pl.col("breakdown") == "overall")
    assert sorted(overall["dataset"].unique()) == ["clamber", "mine"]


def test_dataset_methods_run_fewer_methods_on_a_dataset(tmp_path, monkeypatch):
    """evaluation.dataset_methods: clamber gets base only, mine both methods; every table and check still holds."""
    external = {"clamber": {"format": "clamber", "path": str(REPO / "data/external/clamber_sample.jsonl")},
                "mine": {"format": "generic", "path": str(REPO / "data/external/generic_sample.jsonl")}}
    results = _build(tmp_path, monkeypatch, methods=["base", "clarify_agent"], datasets=["clamber", "mine"],
                     external=external, judge_pairs=[], dataset_methods={"clamber": ["base"]})
    failed = [name for name, ok in _checks(results).items() if not ok]
    assert all(r.success for r in results) and not failed, failed
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    runs = {(d, m): n for d, m, n in p.group_by("dataset", "method").len().iter_rows()}
    assert runs == {("clamber", "base"): 4, ("mine", "base"): 6, ("mine", "clarify_agent"): 6}
    m = pl.read_parquet(tmp_path / "assets/evaluation/metric_tables.parquet")
    assert set(m.filter(pl.col("dataset") == "clamber")["method"]) == {"base"}
    with pytest.raises(ParamsError, match=r"dataset_methods.clarifymt: none of evaluation.methods \['base'\]"):
        parse_params({"evaluation": {"methods": ["base"], "dataset_methods": {"clarifymt": ["cot"]}}})
    # an entry narrows evaluation.methods: a method it names that is not run, or a dataset not evaluated (here in3,
    # and nope, which is not even defined: a run that drops datasets need not edit this mapping), is no error
    narrowed = parse_params({"evaluation": {"methods": ["base", "cot"], "datasets": ["clarifymt"],
                                            "dataset_methods": {"clarifymt": ["cot", "at_cot"], "in3": ["cot"],
                                                                "nope": ["base"]},
                                            "external": {"in3": {"format": "in3", "path": "x.jsonl"}}}})
    assert narrowed.evaluation.methods_on("clarifymt") == ["cot"] and narrowed.evaluation.methods_on("in3") == ["cot"]
    with pytest.raises(ParamsError, match="leaves out trained_method 'base'"):
        parse_params({"evaluation": {"methods": ["base", "cot"], "trained_baseline": "smollm2",
                                     "dataset_methods": {"clarifymt": ["cot"]}}})


def test_external_datasets_alone_need_no_benchmark_outputs(tmp_path, monkeypatch):
    """evaluation.datasets without clarifymt: the group runs on a fresh checkout where no benchmark asset exists."""
    monkeypatch.chdir(tmp_path)
    SCRIPTED["backend"] = ScriptedBackend(eval_responder)
    external = {"clariq": {"format": "clariq", "path": str(REPO / "data/external/clariq_sample.tsv"), "limit": 3}}
    defs = _defs(_params(tmp_path, methods=["base"], datasets=["clariq"], external=external, judge_pairs=[]))
    graph = defs.resolve_asset_graph()
    for name in ("predictions", "judge_scores", "pairwise_judgements"):
        parents = {k.to_user_string() for k in graph.get(dg.AssetKey(["evaluation", name])).parent_keys}
        assert "benchmark/persona_dialogues" not in parents, (name, parents)
    results = materialize_group(defs, "evaluation", dg.DagsterInstance.ephemeral())
    assert results and all(r.success for r in results), _checks(results)
    assert not (tmp_path / "assets/benchmark").exists()
    p = read_asset(tmp_path / "assets", "evaluation", "predictions")
    assert set(p["dataset"]) == {"clariq"} and p.height > 0
    assert (tmp_path / "assets/evaluation/report/report.html").exists()


def test_missing_external_file_fails_with_its_name(tmp_path, monkeypatch):
    results = _build(tmp_path, monkeypatch, methods=["base"], datasets=["nope"], judge_pairs=[],
                     external={"nope": {"format": "clariq", "path": "missing/dev.tsv"}})
    assert not all(r.success for r in results)
    failure = [e for r in results for e in r.all_events if e.is_step_failure]
    assert failure and "missing/dev.tsv" in str(failure[0].event_specific_data.error.message)


def test_bertscore_with_the_local_minilm():
    """BERTScore-F1 on the MiniLM folder shipped in a PyPI package (no hub download)."""
    from dagster_project.core.shared.metrics import bertscore_f1
    from dagster_project.llm.embedder import minilm_path

    f = bertscore_f1(["Which city do you mean?", "Which city do you mean?"],
                     ["Which city do you mean?", "Bananas are a yellow fruit."], minilm_path(), 6)
    assert f[0] == pytest.approx(1.0, abs=1e-4) and f[1] < f[0] - 0.1
    pairs = (["Which city do you mean?", "Do you want the bus or the train?", "Which year?"],
             ["Bananas are a yellow fruit.", "By bus or by train?", "Which year do you mean?"])
    whole = bertscore_f1(*pairs, minilm_path(), 6)
    assert bertscore_f1(*pairs, minilm_path(), 6, chunk=1) == pytest.approx(whole, abs=1e-5)  # chunks change nothing


def test_clarify_report_prints_the_paths(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dagster_project.cli import app

    monkeypatch.chdir(tmp_path)
    index = tmp_path / "assets/index.html"
    out = CliRunner().invoke(app, ["report"])
    assert out.exit_code == 0 and out.stdout.splitlines() == [str(index)]  # nothing built: the index says so
    folder = tmp_path / "assets/evaluation/report"
    folder.mkdir(parents=True)
    (folder / "report.html").write_text("<html></html>")
    (folder / "report.md").write_text("# r")
    out = CliRunner().invoke(app, ["report"])
    assert out.exit_code == 0 and out.stdout.splitlines() == [str(index), str(folder / "report.html"),
                                                              str(folder / "report.md")]


def test_materialize_rejects_an_unknown_partition(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dagster_project.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / ".dagster"))
    monkeypatch.setenv("CLARIFY_PARAMS", "params.yaml")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"evaluation": {"methods": ["base"]}}))
    out = CliRunner().invoke(app, ["materialize", "evaluation", "--partition", "magic|smollm2"])
    assert out.exit_code == 2
    assert "unknown partition(s) ['magic|smollm2']" in out.stdout.replace("\n", "")
    assert not (tmp_path / "assets").exists()
