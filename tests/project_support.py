"""Helpers for end-to-end tests: a throwaway checkout of the project and a subprocess runner."""

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TINY = {
    "intents": {"n_edit_train": 1, "n_edit_test": 0, "n_pair_train": 0, "n_pair_test": 0,
                "n_unambiguous_train": 2, "max_turns": 2, "n_test_unambiguous": 1, "n_test_ood": 1,
                "n_test_dropout": 1, "examples_per_intent": 1},
    # the embedded model for every method; two trained models (plain prompting), served like it on llama.cpp with
    # their LoRA adapters (as the demo does), close the loop against it
    "llm": {"cache_path": ".cache/llm_cache.sqlite",
            "subjects": {"smollm2": {"backend": "llamacpp", "model": "smollm2-135m-instruct"},
                         "clarilm_sft": {"backend": "llamacpp", "model": "training/clarilm_sft"},
                         "clarilm_dpo": {"backend": "llamacpp", "model": "training/clarilm_dpo"}}},
    # ClariLM (logs -> questions -> facets -> annotations): ~20 short LLM calls in all
    "logs": {"max_extractions": 3},
    "questions": {"ql_max_llm_checks": 4, "n_personas": 1, "questions_per_persona": 2, "max_selected": 2},
    "facets": {"log_samples": 2, "llm_max_facets": 2},
    "annotations": {"max_candidates": 3, "max_question_pairs": 1, "answer_max_tokens": 64, "reasoning_max_tokens": 160},
    # the 135M model copies the prompt's example request for some samples (removed as prompt echoes): two syntactic
    # samples leave one valid query; the judge-based filters are off so only the echo rule decides
    "benchmark": {"n_per_subtype": 2, "subtypes": ["syntactic"], "personas": ["precise", "off_focus"],
                  "annotations_path": None, "validation": {"subtype_check": False, "min_quality": 1}},
    "evaluation": {"subject_max_tokens": 32, "methods": ["base", "clarify_agent", "clarify_agent_no_planner"],
                   "max_dialogues": None, "judge_per_subtype": 1, "judge_pairs": [["clarify_agent", "base"]],
                   "bertscore": False, "datasets": ["clarifymt", "clarilm_test"], "dataset_methods": None,
                   "subject_methods": {"clarilm_sft": ["base"], "clarilm_dpo": ["base"]}, "trained_baseline": "smollm2",
                   "trained_pairs": [["clarilm_dpo", "clarilm_sft"]],
                   # model-vs-model judging (Fig. 4) would evaluate its two subjects on more datasets than the others;
                   # tests/core/test_judge_subjects.py covers it
                   "judge_subject_pairs": [], "judge_subject_datasets": None},
    "double_turn": {"max_queries": 2, "rounds": 1, "n_shots": 2, "n_clarify_sampled": 0, "n_direct_samples": 2,
                    "random_repeats": 20, "subject_max_tokens": 24, "generator_max_tokens": 160},
    # retrieval: one 2-turn and one 3-turn session; ~20 short LLM calls (refinement, inference, 1 rerank step)
    "retrieval": {"turn_lengths": [2, 3], "per_length": 1, "rerank_depth": 2,
                  "snippet_chars": 0},
    # training: every model for one optimizer step on 64-token examples (an export without rows: skipped_no_data)
    "training": {"gradient_checkpointing": False,
                 "sft": {"max_steps": 1, "batch_size": 2, "max_length": 64},
                 "dpo": {"max_steps": 1, "batch_size": 2, "max_length": 64},
                 "reranker": {"max_steps": 1, "batch_size": 2, "max_length": 32}},
}


def make_project(tmp_path: Path) -> Path:
    """A throwaway git + DVC checkout of the project with tiny params (real code, real embedded model)."""
    for name in ("dagster_project", "expectations", "data"):  # data/: inputs shipped with the repo (stage deps)
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(REPO / name, tmp_path / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for section, values in TINY.items():
        params.setdefault(section, {}).update(values)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / ".gitignore").write_text("/assets/\n.cache/\n.dagster/\n")
    run(["git", "init", "-q"], tmp_path)
    run([str(BIN / "dvc"), "init", "-q"], tmp_path)
    run(["git", "add", "-A"], tmp_path)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], tmp_path)
    return tmp_path


def run(cmd: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home()), "DVC_NO_ANALYTICS": "1",
           "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(cwd / ".dagster")}
    (cwd / ".dagster").mkdir(exist_ok=True)
    (cwd / ".dagster" / "dagster.yaml").touch()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
