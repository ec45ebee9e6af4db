"""`clarify dvc-stages` and a role served by a trained model (issue 27.7, lib/trained_roles.py): the facets group's
FM-LOG step reads training/fm_log at run time; its stage gets no dep on it (that would close the cycle facets ->
annotations -> training) but a desc naming the params key; a role whose other steps would send the model another
prompt (the logs group's extraction through `extractor`) fails naming the key."""

import pytest

from dagster_project.config import parse_params
from dagster_project.core.clarilm.extraction import EXTRACT, EXTRACT_REFINEMENT
from dagster_project.core.clarilm.facets import FM_LLM, FM_LOG
from dagster_project.defs.facets.assets import facet_candidates_log
from dagster_project.defs.training.group import learned_template
from dagster_project.lib.code_version import compute_fn, llm_tasks
from dagster_project.lib.trained_roles import TrainedRoleError, apply_reads, chain, trained_reads

FM_LOG_MODEL = {"backend": "transformers", "model": "training/fm_log"}
TASKS = {"logs": [EXTRACT, EXTRACT_REFINEMENT], "facets": [FM_LOG, FM_LLM]}
UPSTREAM = {"logs": [], "questions": ["logs"], "facets": ["logs", "questions"], "annotations": ["facets"],
            "training": ["annotations", "logs"], "evaluation": ["training"]}


def _params(roles: dict) -> object:
    return parse_params({"llm": {"roles": {"default": {"model": "smollm2-135m-instruct"}, **roles}}})


def _stages() -> dict:
    return {g: {"cmd": f"clarify materialize {g}", "deps": [f"assets/{u}" for u in up]} for g, up in UPSTREAM.items()}


def test_the_facets_fm_log_step_reads_the_trained_folder_without_a_dvc_cycle():
    params = _params({"extractor:fm_log": FM_LOG_MODEL})
    assert params.llm.role(FM_LOG.role).model == "training/fm_log"
    assert params.llm.role(EXTRACT.role).model == "smollm2-135m-instruct"  # the logs group keeps its extractor
    [read] = trained_reads(params, TASKS, UPSTREAM, learned_template)
    assert (read.group, read.key, read.model, read.cycle) == ("facets", "extractor:fm_log", "training/fm_log",
                                                              ("training", "annotations", "facets"))
    stages = _stages()
    apply_reads(stages, [read])
    facets = stages["facets"]
    assert list(facets)[0] == "desc" and "assets/training" not in facets["deps"]
    assert "llm.roles.extractor:fm_log" in facets["desc"] and "facets -> annotations -> training" in facets["desc"]
    assert "dvc repro -f -s facets" in facets["desc"]
    assert stages["logs"] == _stages()["logs"]


def test_a_group_downstream_of_training_gets_the_folder_as_a_dep():
    params = _params({"extractor:fm_log": FM_LOG_MODEL})
    [read] = trained_reads(params, {"evaluation": [FM_LOG]}, UPSTREAM, learned_template)
    assert read.cycle == ()
    stages = _stages()
    apply_reads(stages, [read])
    assert "desc" not in stages["evaluation"] and stages["evaluation"]["deps"].count("assets/training") == 1


def test_the_shared_extractor_role_pointed_at_fm_log_fails_naming_the_key():
    """llm.roles.extractor also answers the logs group's extraction, whose prompt fm_log never learned (and whose
    output fm_log is trained on: logs -> training -> logs)."""
    with pytest.raises(TrainedRoleError) as err:
        trained_reads(_params({"extractor": FM_LOG_MODEL}), TASKS, UPSTREAM, learned_template)
    msg = str(err.value)
    assert msg.startswith("params.yaml llm.roles.extractor: training/fm_log was trained on the 'fm_log' prompt")
    assert "logs group" in msg and "clarilm_extract_clarification" in msg and 'llm.roles["extractor:fm_log"]' in msg


def test_a_model_the_training_group_does_not_build_is_named():
    params = _params({"extractor:fm_log": {"backend": "transformers", "model": "training/nonesuch"}})
    with pytest.raises(TrainedRoleError, match=r"llm.roles.extractor:fm_log: training/nonesuch"):
        trained_reads(params, TASKS, UPSTREAM, learned_template)


def test_stages_see_the_fm_log_step_and_the_path_back_to_it():
    """build_stages collects each asset's LLM steps: the facets asset reaches FM-LOG through core/clarilm."""
    assert FM_LOG in llm_tasks(compute_fn(facet_candidates_log))
    assert chain(UPSTREAM, "training", "facets") == ("training", "annotations", "facets")
    assert chain(UPSTREAM, "training", "evaluation") == ()
