"""`clarify doctor` checks every input path, endpoint and the cache path, creates nothing and exits non-zero on
any problem; `clarify materialize` names the params key of a missing input before Dagster starts (issue 16
item 10)."""

import socket
from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from dagster_project.cli import app
from dagster_project.config import Params
from dagster_project.runs.preflight import input_paths

REPO = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def write_params(tmp_path: Path, **sections) -> str:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["llm"]["cache_path"] = str(tmp_path / "cache" / "llm.sqlite")
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def doctor(params: str):
    return CliRunner().invoke(app, ["doctor", "--params", params, "--timeout", "1"], terminal_width=200)


def test_doctor_passes_on_the_shipped_inputs_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    result = doctor(write_params(tmp_path))
    assert result.exit_code == 0, result.output
    assert "no problems found" in result.output
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("sections", "problem"), [
    ({"intents": {"dataset": "data/intents/nope.csv"}}, "intents.dataset: data/intents/nope.csv not found"),
    ({"retrieval": {"qrels_path": "data/retrieval"}}, "retrieval.qrels_path: data/retrieval is not a file"),
    ({"logs": {"paths": ["data/nowhere/*.jsonl", "data/nowhere/*.json"]}}, "logs.paths: no file matches"),
    ({"double_turn": {"inputs": [{"path": "data/double_turn/gone.json", "format": "ambigqa"}]}},
     "double_turn.inputs[0].path: data/double_turn/gone.json not found"),
    ({"evaluation": {"datasets": ["clarifymt", "mine"],
                     "external": {"mine": {"format": "generic", "path": "data/external/none.jsonl"}}}},
     "evaluation.external.mine.path: data/external/none.jsonl not found"),
    ({"llm": {"roles": {"default": {"backend": "openai", "base_url": "http://127.0.0.1:PORT/v1"}}}},
     "llm role default: http://127.0.0.1:PORT/v1 unreachable within 1 s"),
    ({"llm": {"roles": {"default": {"backend": "openai", "base_url": "http://127.0.0.1:PORT/v1",
                                    "api_key_env": "CLARIFY_TEST_NO_SUCH_KEY"}}}},
     "environment variable CLARIFY_TEST_NO_SUCH_KEY (api_key_env) is not set"),
    ({"llm": {"roles": {"default": {"model": "/no/such/model.gguf"}}}}, "llm role default:"),
])
def test_doctor_names_each_problem_and_exits_1(tmp_path, monkeypatch, sections, problem):
    monkeypatch.chdir(REPO)
    port = str(closed_port())
    sections = yaml.safe_load(yaml.safe_dump(sections).replace("PORT", port))
    result = doctor(write_params(tmp_path, **sections))
    assert result.exit_code == 1, result.output
    assert problem.replace("PORT", port) in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "cache").exists()


def test_a_trained_model_on_vllm_is_described_as_its_training_folder(tmp_path, monkeypatch):
    from dagster_project.config.llm import RoleConfig
    from dagster_project.runs.preflight import role_check

    monkeypatch.chdir(tmp_path)  # no assets/training here: the folder is not built yet, which is no problem
    found, problem = role_check(RoleConfig(backend="vllm", model="training/clarilm_sft"), 1.0)
    assert "trained model: not built yet" in found and "model id" not in found
    assert problem is None or "vllm is not installed" in problem  # this venv has no vllm; .venv-vllm has


def test_doctor_refuses_a_cache_path_it_cannot_create_and_creates_no_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    (tmp_path / "plain_file").write_text("x")
    params = write_params(tmp_path)
    for cache_path, problem in ((tmp_path / "plain_file" / "a" / "b" / "llm.sqlite", "is a file"),
                                (tmp_path / "deep" / "er" / "llm.sqlite", None)):
        data = yaml.safe_load(Path(params).read_text())
        data["llm"]["cache_path"] = str(cache_path)
        Path(params).write_text(yaml.safe_dump(data))
        result = doctor(params)
        assert result.exit_code == (1 if problem else 0), result.output
        assert problem is None or problem in " ".join(result.output.split())
    assert not (tmp_path / "deep").exists()


def test_every_shipped_input_file_is_checked():
    """Guards the key list: every default params value that points into data/ is one input_paths() knows."""
    def leaves(value, key=""):
        if hasattr(value, "model_fields"):
            for name in type(value).model_fields:
                yield from leaves(getattr(value, name), f"{key}.{name}" if key else name)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from leaves(item, f"{key}[{i}]")
        elif isinstance(value, dict):
            for name, item in value.items():
                yield from leaves(item, f"{key}.{name}")
        elif isinstance(value, str) and value.startswith("data/"):
            yield key

    params = Params(**yaml.safe_load((REPO / "params.yaml").read_text()))
    shipped = set(leaves(params))
    assert shipped and shipped <= {key for _, key, _ in input_paths(params)}


def test_materialize_names_the_params_key_of_a_missing_input_before_dagster_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    params = write_params(tmp_path, intents={"dataset": "data/intents/nope.csv"})
    result = CliRunner().invoke(app, ["materialize", "intents", "--params", params], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "intents.dataset: data/intents/nope.csv not found"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []
