"""Prompt templates: every file renders with what the core code passes; versions are content hashes."""

import re
from importlib import resources
from string import Template

import pytest

from dagster_project.llm.prompts import Prompt, load_prompt

# The placeholders each template is rendered with by core/ (benchmark.py, simulation.py, agent/base.py).
SIM = dict(query="Q?", clarifying_question="CQ?", missing_info="city, date", persona_name="Precise",
           behaviour="Gives exactly the missing details.")
VALUES = {
    "generate_single_turn": dict(subtype_name="lexical", definition="DEF.", example="EX?",
                                 example_clarification="EXC?", topic_hint="travel"),
    "rate_single_turn": dict(subtype_name="Lexical", query="Q?", definition="DEF.", clarifying_question="CQ?"),
    "simulate_two_turn": SIM,
    "simulate_three_turn": SIM,
    "evaluate_base": dict(message="What is bass?"),
    # evaluation group (agent/*.py, judge.py)
    "evaluate_cot": dict(message="What is bass?"),
    "evaluate_at_cot": dict(message="What is bass?", taxonomy="- lexical: DEF."),
    "evaluate_intent_sim": dict(message="What is bass?"),
    "evaluate_base_json": dict(message="What is bass?"),
    "evaluate_cot_json": dict(message="What is bass?"),
    "evaluate_at_cot_text": dict(message="What is bass?", taxonomy="- lexical: DEF."),
    "evaluate_intent_sim_text": dict(message="What is bass?"),
    "evaluate_at_cot_actions": dict(message="What is bass?", taxonomy="- semantic: DEF."),
    "evaluate_at_cot_actions_json": dict(message="What is bass?", taxonomy="- semantic: DEF."),
    "evaluate_intent_sim_question": dict(message="What is bass?"),
    "evaluate_intent_sim_question_json": dict(message="What is bass?"),
    "evaluate_intent_sim_user": dict(dialogue="User: Q?", question="CQ?"),
    "evaluate_intent_sim_user_json": dict(dialogue="User: Q?", question="CQ?"),
    "evaluate_intent_sim_answer": dict(message="What is bass?"),
    "evaluate_intent_sim_answer_json": dict(message="What is bass?"),
    "agent_input": dict(dialogue="User: Q?"),
    "agent_perceiver": dict(request="REQ.", latest="LATEST.", slots="- city: unfilled"),
    "agent_forecaster": dict(dialogue="User: Q?", personas="- precise: P."),
    "agent_planner": dict(dialogue="User: Q?", request="REQ.", slots="- city: unfilled", rsc="RSC-NO",
                          persona="PERSONA-X"),
    "agent_output": dict(dialogue="User: Q?", request="REQ.", instruction="Ask about city."),
    "agent_output_text": dict(dialogue="User: Q?", request="REQ.", instruction="Ask about city."),
    "judge_question": dict(dialogue="User: Q?", reference="REF?", candidate="CAND?"),
    # ClariLM groups (logs.py, questions.py, facets.py, annotations.py)
    "clarilm_extract_clarification": dict(query="Q?", assistant_turn="CQ?", reply="R."),
    "clarilm_extract_refinement": dict(query="Q?", reply="R."),
    "clarilm_ql_filter": dict(question="Q?"),
    "clarilm_generate_question": dict(persona="a nurse", examples="- EX?"),
    "clarilm_transform_question": dict(question="Q?", instruction="Make it simpler."),
    "clarilm_fm_log": dict(question="Q?", examples="- EX?"),
    "clarilm_fm_llm": dict(question="Q?", max_facets="3"),
    "clarilm_answer": dict(question="Q?"),
    "clarilm_cotap": dict(question="Q?", options="A. answer"),
    "judge_pairwise": dict(dialogue="User: Q?", reference="REF?", first="FIRST?", second="SECOND?"),
    "judge_pairwise_output": dict(dialogue="User: Q?", first="FIRST?", second="SECOND?"),
    "check_subtype_fit": dict(subtype_name="Lexical", definition="DEF.", query="Q?"),
    # double_turn group (core/double_turn.py)
    "double_turn_answer": dict(examples="Question: A?\nAnswer: B", question="Q?"),
    "double_turn_answer_base": dict(examples="Question: A?\nAnswer: B", question="Q?"),
    "double_turn_sft": dict(question="Q?", answer_list="1. Y1\n2. Y2", reply_fields='"reply_1", "reply_2"'),
    "double_turn_clarify": dict(question="Q?"),
    "double_turn_user": dict(question="Q?", expected_answer="Y1", clarifying_question="CQ?"),
    "double_turn_answer_after": dict(question="Q?", clarifying_question="CQ?", reply="REPLY."),
    "double_turn_judge": dict(question="Q?", response="RESP."),
    "double_turn_subject_direct": dict(question="Q?"),
    "double_turn_subject_clarify": dict(question="Q?"),
    "double_turn_subject_decide": dict(question="Q?"),
    # intents group (core/intents.py)
    "intents_edit": dict(catalogue="- CAT: DESC", query="Q-EDIT?", intent="INTENT-X", examples="GOOD-EX / BAD-EX"),
    "intents_verify": dict(intent_list="- CAT-LIST", query="Q-VERIFY?"),
    "intents_pair": dict(intent_a="INT-A", description_a="DESC-A", example_a="EX-A?", intent_b="INT-B",
                         description_b="DESC-B", example_b="EX-B?"),
    "intents_assistant": dict(catalogue="- CAT: DESC", examples="Example 1: DEMO", query="Q-USER?"),
    "intents_assistant_json": dict(catalogue="- CAT: DESC", examples="Example 1: DEMO", query="Q-USER?"),
    "intents_user": dict(ambiguous_query="AMB?", unambiguous_query="UNAMB.", transcript="user: AMB?"),
    "intents_judge_info": dict(intent_list="- CAT-LIST", transcript="[user 1] AMB?", n="7"),  # no true query (Fig. 6)
    "intents_judge_quality": dict(intent_list="- CAT-LIST", transcript="[assistant 1] CQ?",
                                  turn_list="[assistant 1]", n="9"),
    # retrieval group (core/retrieval.py)
    "retrieval_similar_pairs": dict(question1="Q1?", answer1="A1.", question2="Q2?", answer2="A2."),
    "retrieval_facet_revealed": dict(facet="FACET.", question="Q?", answer="A."),
    "retrieval_rewrite_conceal": dict(facet="FACET.", question="Q?", answer="A."),
    "retrieval_rewrite_hint": dict(facet="FACET.", question="Q?", answer="A."),
    "retrieval_rewrite_reveal": dict(facet="FACET.", question="Q?", answer="A."),
    "retrieval_infer_query": dict(conversation="User: REQ\nSystem: Q?\nUser: A."),
    "retrieval_rerank_step": dict(query="QUERY", conversation="User: REQ", candidates="- [k1 | k2] SNIP",
                                  chosen="none yet"),
}


def prompt_names():
    return sorted(p.name[:-4] for p in resources.files("dagster_project.llm.prompts").iterdir()
                  if p.name.endswith(".txt"))


def values_for(name: str) -> dict[str, str]:
    """The values core/ passes (VALUES), else one made-up value per placeholder: a new paper's template needs no
    entry here to be checked."""
    if name in VALUES:
        return VALUES[name]
    p = load_prompt(name)
    ids = set(Template(p.system).get_identifiers()) | set(Template(p.user).get_identifiers())
    return {i: f"<{i.upper()}-VALUE>" for i in sorted(ids)}


def test_values_name_only_existing_templates():
    assert sorted(set(VALUES) - set(prompt_names())) == []


def test_every_template_is_used_by_a_registered_group():
    """The group registry's assets reach every template (lib/code_version's walker): none is dead."""
    from dagster_project.config import Params
    from dagster_project.definitions import group_definitions
    from dagster_project.lib.code_version import compute_fn, reachable

    used: set[str] = set()
    for a in group_definitions(Params()).assets or []:
        if getattr(a, "is_executable", False):
            used |= reachable(compute_fn(a))[0]
    assert sorted(set(prompt_names()) - used) == []


@pytest.mark.parametrize("name", prompt_names())
def test_template_renders_with_core_placeholders(name):
    p = load_prompt(name)
    assert p.name == name
    assert p.system.strip() and p.user.strip()
    assert "###" not in p.system and "###" not in p.user
    msgs = p.messages(**values_for(name))
    assert [m["role"] for m in msgs] == ["system", "user"]
    for m in msgs:
        assert not re.search(r"\$\w", m["content"]), m["content"]  # nothing left unsubstituted
    # every value passed actually appears in the rendered text (no unused placeholder)
    text = "\n".join(m["content"] for m in msgs)
    for v in values_for(name).values():
        assert v in text


@pytest.mark.parametrize("name", prompt_names())
def test_missing_placeholder_raises_key_error(name):
    values = dict(values_for(name))
    dropped = sorted(values)[0]
    del values[dropped]
    with pytest.raises(KeyError, match=dropped):
        load_prompt(name).messages(**values)


def test_evaluate_base_mentions_protocol():
    p = load_prompt("evaluate_base")
    assert '"The answer is"' in p.system and '"The clarifying question is"' in p.system


def test_version_is_content_hash():
    a = Prompt("x", "sys", "user $q")
    assert a.version.startswith("x@") and len(a.version) == len("x@") + 12
    assert Prompt("x", "sys", "user $q").version == a.version
    assert Prompt("x", "sys", "user  $q").version != a.version
    assert Prompt("x", "sys!", "user $q").version != a.version
    assert Prompt("y", "sys", "user $q").version != a.version
    # the boundary between system and user is part of the hash
    assert Prompt("x", "ab", "c").version != Prompt("x", "a", "bc").version


def test_loaded_version_stable():
    assert load_prompt("evaluate_base").version == load_prompt("evaluate_base").version
    p = load_prompt("evaluate_base")
    assert Prompt(p.name, p.system, p.user).version == p.version


def test_empty_system_gives_user_only():
    msgs = Prompt("x", "  \n", "Hello $who ").messages(who="you")
    assert msgs == [{"role": "user", "content": "Hello you"}]


def test_dollar_in_values_is_not_reinterpreted():
    msgs = Prompt("x", "S", "Q: $q").messages(q="costs $5 or ${x}")
    assert msgs[1]["content"] == "Q: costs $5 or ${x}"


def test_unknown_prompt_raises():
    with pytest.raises(FileNotFoundError):
        load_prompt("no_such_prompt")
