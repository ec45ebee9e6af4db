"""params.yaml `evaluation` section: methods, datasets, external data and judge pairs are validated."""

import pytest

from dagster_project.config import METHOD_NAMES, ParamsError, load_params, parse_params


def test_repo_params_list_every_method_and_ablation():
    p = load_params()
    assert p.evaluation.methods == list(METHOD_NAMES)
    assert p.evaluation.max_dialogues is not None  # the demo evaluates a sample


def test_defaults_match_the_paper():
    e = parse_params({}).evaluation
    assert (e.vote_k, e.vote_temperature, e.intent_k, e.intent_tau, e.comparison_turn) == (5, 0.7, 5, 0.5, 2)
    assert e.methods == ["base"] and e.datasets == ["clarifymt"] and e.max_dialogues is None


@pytest.mark.parametrize("section, message", [
    ({"methods": ["base", "magic"]}, "evaluation.methods.1"),
    ({"methods": ["base", "base"]}, "listed twice"),
    ({"datasets": ["clarifymt", "clamber"]}, "unknown ['clamber']"),
    ({"external": {"clarifymt": {"format": "generic", "path": "x"}}, "datasets": ["clarifymt"]}, "reserved"),
    ({"external": {"c": {"format": "squad", "path": "x"}}}, "evaluation.external.c.format"),
    ({"judge_pairs": [["base", "base"]]}, "two different methods"),
    ({"judge_pairs": [["base", "cot"]]}, "['cot'] not in evaluation.methods"),
    ({"max_dialogues": 0}, "evaluation.max_dialogues"),
])
def test_bad_evaluation_settings_name_the_key(section, message):
    with pytest.raises(ParamsError) as err:
        parse_params({"evaluation": section})
    assert message in str(err.value)


def test_external_dataset_accepted():
    e = parse_params({"evaluation": {"datasets": ["clarifymt", "c"], "methods": ["base", "cot"],
                                     "judge_pairs": [["cot", "base"]],
                                     "external": {"c": {"format": "clamber", "path": "f.jsonl", "limit": 5}}}}).evaluation
    assert e.external["c"].format == "clamber" and e.external["c"].clariq_clarify_from == 2


def test_trained_subjects_see_one_dataset_in_the_demo_and_every_dataset_in_the_presets():
    assert load_params().evaluation.trained_datasets == ["clarifymt"]
    for preset in ("params.paper.yaml", "params.gpu.yaml"):
        assert load_params(preset).evaluation.trained_datasets is None, preset
    assert parse_params({}).evaluation.trained_datasets is None  # default: every dataset


@pytest.mark.parametrize("trained, message", [
    (["clariq"], "evaluation.trained_datasets: ['clariq'] not in evaluation.datasets"),
    ([], "evaluation.trained_datasets: an empty list"),
])
def test_trained_datasets_must_be_evaluated_datasets(trained, message):
    with pytest.raises(ParamsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_params({"evaluation": {"datasets": ["clarifymt"], "trained_datasets": trained}})
