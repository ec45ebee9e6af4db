"""Values that look like rich markup ('[/bold]', '[red]x') are printed as text by every command (issue 29 item 3):
params values of each type through `clarify doctor`, `materialize` and `plan`, and SQL names, values and errors
through `clarify sql`; the output names the key and holds no traceback."""

from pathlib import Path

import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.lib.warehouse import rebuild_views, write_parquet_atomic

REPO = Path(__file__).resolve().parents[2]

# (params sections, group, what the output must say): one params key of each type
CASES = {
    "int given a string": ({"logs": {"max_message_chars": "[/bold]"}}, "logs",
                           "logs.max_message_chars: Input should be a valid integer (got '[/bold]')"),
    "string": ({"evaluation": {"agent_method": "[red]x"}}, "evaluation",
               "evaluation.agent_method: Input should be 'base'"),
    "path": ({"intents": {"dataset": "[/bold]/[red]x.csv"}}, "intents",
             "intents.dataset: no file matches ['[/bold]/[red]x.csv']"),
    "list": ({"logs": {"paths": ["[/bold]", "[red]x/*.jsonl"]}}, "logs",
             "logs.paths: no file matches ['[/bold]', '[red]x/*.jsonl']"),
}


def write_params(tmp_path: Path, sections: dict) -> str:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["llm"]["cache_path"] = str(tmp_path / "cache" / "llm.sqlite")
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def run(*args: str):
    result = CliRunner().invoke(app, list(args), terminal_width=400)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "MarkupError" not in result.output, result.output
    return result


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["doctor", "materialize", "plan"])
def test_a_markup_like_params_value_is_named_as_text(tmp_path, monkeypatch, case, command):
    monkeypatch.chdir(REPO)
    sections, group, expected = CASES[case]
    params = write_params(tmp_path, sections)
    args = ["doctor", "--timeout", "1"] if command == "doctor" else [command, group]
    result = run(*args, "--params", params)
    assert result.exit_code in (1, 2), result.output
    assert expected in " ".join(result.output.split()), result.output
    assert not (tmp_path / "cache").exists()


def test_a_markup_like_model_name_is_printed_in_the_doctor_table(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("doctor", "--timeout", "1", "--params",
                 write_params(tmp_path, {"llm": {"roles": {"default": {"model": "[/bold]"}}}}))
    assert result.exit_code == 1
    assert "llm role default: GGUF model file [/bold] does not exist" in " ".join(result.output.split())


@pytest.mark.parametrize("command", [["doctor"], ["materialize", "logs"], ["plan", "logs"]])
def test_a_markup_like_params_path_is_named(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    result = run(*command, "--params", "[/bold][red]p.yaml")
    assert result.exit_code == 2
    assert "[/bold][red]p.yaml: file not found" in result.output


def test_sql_prints_markup_like_names_values_and_errors_as_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({"[red]x": ["[/bold]", "[bold]y[/]"]}), Path("assets/benchmark/taxonomy.parquet"))
    rebuild_views()
    result = run("sql", 'select "[red]x" from benchmark.taxonomy')
    assert result.exit_code == 0
    assert "[red]x" in result.output and "[/bold]" in result.output and "[bold]y[/]" in result.output
    result = run("sql", "--vertical", "select * from benchmark.taxonomy")
    assert "[red]x: [/bold]" in result.output
    result = run("sql", 'select "[/bold]" from benchmark.taxonomy')
    assert result.exit_code == 1 and 'Referenced column "[/bold]" not found' in result.output
    assert 'Candidate bindings: "[red]x"' in result.output


def test_summary_prints_markup_like_dataset_subject_and_method_names_as_text(tmp_path, monkeypatch):
    """Subject and dataset names come from params (llm.subjects, evaluation.datasets) into the tables."""
    monkeypatch.chdir(tmp_path)
    write_parquet_atomic(pl.DataFrame({
        "dataset": ["[red]d", "[red]d"], "subject": ["[/bold]", "[/bold]"], "method": ["[b]m", "[b]m"],
        "persona": [None, "precise"], "breakdown": ["overall", "by_persona"], "n": [10, 4], "accuracy": [0.5, 0.25],
        "under_clarification": [0.3, 0.5], "over_clarification": [0.1, 0.0], "invalid": [0.1, 0.25],
    }), Path("assets/evaluation/metric_tables.parquet"))
    rebuild_views()
    for args in (["summary"], ["summary", "--all"]):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "[red]d" in result.output and "[/bold]" in result.output and "[b]m" in result.output, result.output


def test_plan_prints_a_markup_like_group_name_as_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(yaml.safe_dump({"llm": {"cache_path": str(tmp_path / "cache.sqlite")}}))
    result = run("plan", "[/bold]")
    assert "LLM plan for group '[/bold]'" in result.output
