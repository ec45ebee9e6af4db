"""params.yaml validation (config.py): errors name the dotted key."""

from pathlib import Path

import pytest

from dagster_project.config import (
    LLMConfig, Params, ParamsError, RoleConfig, load_params, parse_params,
)

REPO = Path(__file__).resolve().parents[2]


def test_defaults():
    p = parse_params({})
    assert isinstance(p, Params)
    assert p.benchmark.n_per_subtype == 2
    assert p.benchmark.dedup_tau == 0.7
    assert p.benchmark.dedup_block == 2048
    assert p.evaluation.methods == ["base"]
    assert p.llm.roles["default"].backend == "llamacpp"
    assert list(p.llm.subjects) == ["smollm2"]
    assert p.quality.max_error_rate == 0.2
    assert p.embedder.model == "all-MiniLM-L6-v2"
    assert parse_params(None) == p


def test_unknown_top_level_key():
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmrk": {}})
    assert "benchmrk" in str(e.value)
    assert "unknown key" in str(e.value)


def test_unknown_nested_key_names_dotted_path():
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmark": {"n_per_subtyp": 3}})
    assert "benchmark.n_per_subtyp" in str(e.value)
    with pytest.raises(ParamsError) as e:
        parse_params({"llm": {"roles": {"default": {"modle": "x"}}}})
    assert "llm.roles.default.modle" in str(e.value)


def test_wrong_type_names_key_and_value():
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmark": {"n_per_subtype": "many"}}, source="my.yaml")
    msg = str(e.value)
    assert msg.startswith("my.yaml:")
    assert "benchmark.n_per_subtype" in msg
    assert "'many'" in msg


def test_out_of_range_value():
    with pytest.raises(ParamsError, match=r"benchmark\.dedup_tau"):
        parse_params({"benchmark": {"dedup_tau": 1.5}})
    with pytest.raises(ParamsError, match=r"benchmark\.n_per_subtype"):
        parse_params({"benchmark": {"n_per_subtype": 0}})


def test_every_bad_key_is_reported():
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmark": {"n_per_subtype": "x", "foo": 1}, "quality": {"max_error_rate": 2}})
    msg = str(e.value)
    assert "3 invalid setting(s)" in msg
    for key in ("benchmark.n_per_subtype", "benchmark.foo", "quality.max_error_rate"):
        assert key in msg


def test_params_error_is_value_error():
    assert issubclass(ParamsError, ValueError)


def test_unknown_role_name():
    with pytest.raises(ParamsError) as e:
        parse_params({"llm": {"roles": {"default": {}, "narrator": {}}}})
    assert "narrator" in str(e.value)
    assert "llm" in str(e.value)


def test_roles_need_default():
    with pytest.raises(ParamsError, match="default"):
        parse_params({"llm": {"roles": {"judge": {}}}})


def test_subjects_must_not_be_empty():
    with pytest.raises(ParamsError, match="subject"):
        parse_params({"llm": {"subjects": {}}})


def test_openai_backend_needs_base_url():
    with pytest.raises(ParamsError) as e:
        parse_params({"llm": {"roles": {"default": {"backend": "openai", "model": "gpt"}}}})
    assert "base_url" in str(e.value)
    assert "llm.roles.default" in str(e.value)
    ok = parse_params({"llm": {"roles": {"default": {"backend": "openai", "model": "gpt",
                                                     "base_url": "http://localhost:1/v1"}}}})
    assert ok.llm.roles["default"].backend == "openai"


def test_unknown_backend():
    with pytest.raises(ParamsError, match=r"llm\.roles\.default\.backend"):
        parse_params({"llm": {"roles": {"default": {"backend": "ollama"}}}})


def test_unknown_persona_and_subtype_names():
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmark": {"personas": ["precise", "grumpy"]}})
    assert "grumpy" in str(e.value) and "benchmark.personas" in str(e.value)
    with pytest.raises(ParamsError) as e:
        parse_params({"benchmark": {"subtypes": ["lexical", "lexicon"]}})
    assert "lexicon" in str(e.value) and "benchmark.subtypes" in str(e.value)
    # interactional subtypes are not query subtypes
    with pytest.raises(ParamsError, match="off_focus"):
        parse_params({"benchmark": {"subtypes": ["off_focus"]}})
    good = parse_params({"benchmark": {"subtypes": ["lexical"], "personas": ["refusal"]}})
    assert good.benchmark.subtypes == ["lexical"]


def test_unknown_evaluation_method():
    with pytest.raises(ParamsError, match=r"evaluation\.methods"):
        parse_params({"evaluation": {"methods": ["magic"]}})


def test_role_lookup_and_fallback():
    llm = LLMConfig(
        roles={"default": RoleConfig(model="base-model"), "judge": RoleConfig(model="judge-model")},
        subjects={"small": RoleConfig(model="small-model"), "big": RoleConfig(model="big-model")},
    )
    assert llm.role("judge").model == "judge-model"
    assert llm.role("generator").model == "base-model"  # unset role -> default
    assert llm.role("default").model == "base-model"
    assert llm.role("subject:big").model == "big-model"
    assert llm.role("subject:small").model == "small-model"
    with pytest.raises(KeyError, match="nope"):
        llm.role("subject:nope")


def test_config_is_frozen():
    p = parse_params({})
    with pytest.raises(Exception):
        p.benchmark.n_per_subtype = 5  # type: ignore[misc]


def test_load_params_missing_file(tmp_path):
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "nope.yaml")


def test_load_params_invalid_yaml(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("benchmark:\n  n_per_subtype: [1, 2\n")
    with pytest.raises(ParamsError, match="not valid YAML") as e:
        load_params(f)
    assert str(f) in str(e.value)


def test_load_params_top_level_not_mapping(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(ParamsError, match="mapping"):
        load_params(f)


def test_load_params_empty_file_gives_defaults(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("# nothing\n")
    assert load_params(f) == parse_params({})


def test_load_params_bad_key_names_file(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("benchmark:\n  n_per_subtyp: 3\n")
    with pytest.raises(ParamsError) as e:
        load_params(f)
    assert str(f) in str(e.value) and "benchmark.n_per_subtyp" in str(e.value)


def test_repo_params_yaml_loads():
    p = load_params(REPO / "params.yaml")
    assert p.benchmark.n_per_subtype == 1
    assert p.evaluation.methods[0] == "base" and "clarify_agent" in p.evaluation.methods
    assert p.evaluation.subject_max_tokens == 48
    assert "smollm2" in p.llm.subjects
    assert p.llm.role("subject:smollm2").model == "smollm2-135m-instruct"
