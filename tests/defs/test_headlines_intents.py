"""headlines/intents_headline: a scripted tuned model that replies perfectly in the plain-text format it was trained
on scores 100% beside a base that does not, the prompted subjects and the paper's rows; a sweep model the training
skipped keeps a row that says why."""

import json
import re

import dagster as dg
import polars as pl
import pytest
import yaml
from fakes import ScriptedBackend
from defs.test_intents import INTENTS, TEXT_TO_INTENT, _intent_in, _write_data, responder

from dagster_project.config import load_params
from dagster_project.core.training.template import intents_template
from dagster_project.defs.headlines import assets as headlines
from dagster_project.defs.intents import assets as intents
from dagster_project.defs.quality.checks import load_suites, validate_frame
from dagster_project.lib.catalog import describe
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager
from dagster_project.training.model_folder import RESULT_SCHEMA


def tuned_plain(job, idx):
    """A model that learned the intents export perfectly: plain text, an intent of the listed catalogue or
    out of domain, one question on an ambiguous query, then the intent the user's reply names."""
    assert job.json_schema is None, "a trained model must be prompted in its plain-text training format"
    system = job.messages[0]["content"]
    users = [m["content"] for m in job.messages if m["role"] == "user"]
    listed = re.findall(r"^- (\w+):", system, re.M)
    first = users[0]
    if "edit)" in first or first.startswith("PAIR"):
        return "Is it about one order or another?" if len(users) == 1 else _intent_in(users[-1])
    true = TEXT_TO_INTENT.get(first.casefold())
    return true if true in listed else "out of domain"


def base_plain(job, idx):
    return "I am not sure what you need."


def _folder(root, name, base, template=True):
    (root / name / "adapter").mkdir(parents=True)
    (root / name / "adapter" / "adapter_config.json").write_text("{}")
    meta = {"base_model": str(base), **({"template": intents_template().record()} if template else {})}
    (root / name / "training.json").write_text(json.dumps(meta))


def test_tuned_model_scored_in_its_training_format(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_data(tmp_path)
    base = tmp_path / "base_hf"
    base.mkdir()
    (base / "config.json").write_text("{}")
    for name in ("intents_tuned", "intents_tuned_p85"):
        _folder(tmp_path / "assets" / "training", name, base)
    _folder(tmp_path / "assets" / "training", "intents_tuned_p75", base, template=False)  # trained before templates
    data = {
        "llm": {"cache_path": str(tmp_path / "cache.sqlite"),
                "subjects": {"smollm2": {"backend": "llamacpp"},
                             "smollm2_hf": {"backend": "transformers", "model": str(base)},
                             "intents_tuned": {"backend": "transformers", "model": "training/intents_tuned"}}},
        "evaluation": {"trained_baseline": "smollm2_hf", "trained_pairs": [], "min_n_significance": 2},
        "training": {"models": ["intents_tuned"]},
        "intents": {"dataset": "data/utterances.csv", "catalog": "data/catalog.jsonl", "few_shot": "data/few_shot.jsonl",
                    "ambiguous_dataset": "data/ambiguous.jsonl", "n_edit_train": 0, "n_edit_test": 1,
                    "n_pair_train": 0, "n_pair_test": 1, "pair_sample_above": 0, "n_unambiguous_train": 0,
                    "n_test_unambiguous": 99, "n_test_ood": 5, "n_test_dropout": 2, "subjects": ["smollm2"],
                    "sweep_percentiles": [85, 75, 65]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params(tmp_path / "params.yaml")
    sent: dict[str, ScriptedBackend] = {}

    def backend(cfg):
        plain = tuned_plain if cfg.model.startswith("training/") else base_plain
        return sent.setdefault(cfg.model, ScriptedBackend(responder if cfg.backend == "llamacpp" else plain))

    @dg.asset(key=["training", "intents_tuned"])
    def intents_tuned() -> pl.DataFrame:
        rows = [{"model": "intents_tuned", "status": "trained"}, {"model": "intents_tuned_p85", "status": "trained"},
                {"model": "intents_tuned_p75", "status": "trained"},
                {"model": "intents_tuned_p65", "status": "skipped_no_data", "reason": "no kept rows"}]
        return pl.DataFrame(rows, schema=RESULT_SCHEMA)

    llm = LLMResource(params.llm, backends={"llamacpp": backend, "transformers": backend})
    assets = [*dg.load_assets_from_modules([intents]), intents_tuned, *headlines.build(params).assets]
    wanted = [["intents", n] for n in ("intent_catalog", "intent_utterances", "intent_utterances_rejected",
                                       "ambiguous_queries", "eval_conversations", "intent_eval")]
    wanted += [["training", "intents_tuned"], ["headlines", "intents_trained_conversations"],
               ["headlines", "intents_headline"]]
    result = dg.materialize(assets, selection=[dg.AssetKey(k) for k in wanted],
                            resources={"io_manager": WarehouseIOManager(), "params": params, "llm": llm})
    assert result.success
    table = pl.read_parquet(tmp_path / "assets/headlines/intents_headline.parquet")
    rows = {r["subject"]: r for r in table.iter_rows(named=True)}
    assert rows["smollm2"]["system"] == "prompted" and rows["smollm2_hf"]["system"] == "untuned_base"
    for tuned in ("intents_tuned", "intents_tuned_p85"):
        r = rows[tuned]
        assert r["system"] == "tuned" and r["status"] == "ok"
        assert (r["ic_accuracy"], r["ood_accuracy"], r["ood_dropout_accuracy"], r["ambiguous_accuracy"]) == (1, 1, 1, 1)
        assert r["n_unambiguous"] == len(INTENTS) and r["n_ood_dropout"] == 2 and r["excluded"] == 0
        assert r["ic_accuracy_diff"] == 1.0 and r["ic_accuracy_n_paired"] == len(INTENTS)
        assert r["ic_accuracy_verdict"].startswith("not significant")  # 3 discordant pairs: exact p = 0.25
    assert rows["intents_tuned"]["percentile"] == 85.0 and rows["intents_tuned_p85"]["percentile"] == 85.0
    assert rows["smollm2_hf"]["ic_accuracy"] == 0.0
    skipped = rows["intents_tuned_p65"]
    assert skipped["status"] == "not_served" and "no kept rows" in skipped["reason"] and skipped["ic_accuracy"] is None
    old = rows["intents_tuned_p75"]  # a folder without a recorded template is refused: retrain it
    assert old["status"] == "not_served" and "no `template` field" in old["reason"] and "retrain" in old["reason"]
    assert "training/intents_tuned_p75" not in sent
    assert rows["intents_tuned"]["unfair_reference"] is None  # the base it was trained from, served the same way
    published = table.filter(pl.col("system") == "published")
    assert published.height == 14 and published["source"].str.contains("Table").all()
    tuned_ood = published.filter(pl.col("subject") == "Instruction-tuned Llama-3.1-8B")["ood_accuracy"].drop_nulls()
    assert tuned_ood[0] == pytest.approx(0.94)
    # the sweep model no params line names was served as its own subject, in the trained (plain-text) template
    assert sent["training/intents_tuned_p85"].jobs and all(j.json_schema is None for j in sent[str(base)].jobs)
    for name in ("intents_headline", "intents_trained_conversations"):  # every stored column is in the catalog
        cols = pl.read_parquet_schema(tmp_path / f"assets/headlines/{name}.parquet")
        assert not [c for c in cols if not describe(f"headlines/{name}", c)], name
    suites = [s for s in load_suites() if s.group == "headlines" and s.asset.startswith("intents")]
    assert len(suites) == 1
    for suite in suites:  # the GX suites of the stored tables
        ok, results = validate_frame(pl.read_parquet(tmp_path / f"assets/headlines/{suite.asset}.parquet"), suite, params)
        assert ok, (suite.asset, results)
