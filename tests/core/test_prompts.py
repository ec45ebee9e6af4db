"""Prompt templates: every file (and every reply format of a file) renders with what the core code passes;
versions are content hashes, and the merged text/JSON templates keep the versions their twin files had."""

import importlib
import json
import pkgutil
import re
from importlib import resources
from pathlib import Path
from string import Template

import pytest

import dagster_project.core as core
from dagster_project.llm.prompts import Prompt, PromptFormatError, load_prompt, parse_prompt, prompt_formats
from dagster_project.llm.task import LLMTask

# The placeholders each template is rendered with by core/ (benchmark.py, simulation.py, agent/base.py); a template
# with a text and a JSON format takes the same values in both.
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
    "evaluate_at_cot_actions": dict(message="What is bass?", taxonomy="- semantic: DEF."),
    "evaluate_intent_sim_question": dict(message="What is bass?"),
    "evaluate_intent_sim_user": dict(dialogue="User: Q?", question="CQ?"),
    "evaluate_intent_sim_answer": dict(message="What is bass?"),
    "agent_input": dict(dialogue="User: Q?"),
    "agent_perceiver": dict(request="REQ.", latest="LATEST.", slots="- city: unfilled"),
    "agent_forecaster": dict(dialogue="User: Q?", personas="- precise: P."),
    "agent_planner": dict(dialogue="User: Q?", request="REQ.", slots="- city: unfilled", rsc="RSC-NO",
                          persona="PERSONA-X"),
    "agent_output": dict(dialogue="User: Q?", request="REQ.", instruction="Ask about city."),
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


def variants() -> list[tuple[str, str | None]]:
    """(template, reply format) of every variant: one per format of a file with a formats section, else one."""
    return [(name, fmt) for name in prompt_names() for fmt in prompt_formats(name) or (None,)]


def variant_id(v: tuple[str, str | None]) -> str:
    return v[0] if v[1] is None else f"{v[0]}[{v[1]}]"


def values_for(name: str, fmt: str | None = None) -> dict[str, str]:
    """The values core/ passes (VALUES), else one made-up value per placeholder: a new paper's template needs no
    entry here to be checked."""
    if name in VALUES:
        return VALUES[name]
    p = load_prompt(name, fmt)
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


def core_tasks() -> set[tuple[str, str | None]]:
    """(template, format) of every LLMTask a core module holds at top level or in a dict, list or tuple there."""
    found = set()
    for mod in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
        for value in vars(importlib.import_module(mod.name)).values():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
            found |= {(t.prompt, t.fmt) for t in items if isinstance(t, LLMTask)}
    return found


def test_every_format_variant_is_used_by_a_core_task():
    """Each (template, format) pair is some core LLMTask's: no format of a merged template is dead."""
    used = core_tasks()
    formatted = [v for v in variants() if v[1] is not None]
    assert formatted and sorted(set(formatted) - used) == []


@pytest.mark.parametrize("variant", variants(), ids=variant_id)
def test_template_renders_with_core_placeholders(variant):
    name, fmt = variant
    p = load_prompt(name, fmt)
    assert p.name == name
    assert p.system.strip() and p.user.strip()
    assert "###" not in p.system and "###" not in p.user
    msgs = p.messages(**values_for(name, fmt))
    assert [m["role"] for m in msgs] == ["system", "user"]
    for m in msgs:
        assert not re.search(r"\$\w", m["content"]), m["content"]  # nothing left unsubstituted
    # every value passed actually appears in the rendered text (no unused placeholder)
    text = "\n".join(m["content"] for m in msgs)
    for v in values_for(name).values():
        assert v in text


@pytest.mark.parametrize("variant", variants(), ids=variant_id)
def test_missing_placeholder_raises_key_error(variant):
    name, fmt = variant
    values = dict(values_for(name, fmt))
    dropped = sorted(values)[0]
    del values[dropped]
    with pytest.raises(KeyError, match=dropped):
        load_prompt(name, fmt).messages(**values)


def test_evaluate_base_mentions_protocol():
    p = load_prompt("evaluate_base", "text")
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
    assert load_prompt("judge_question").version == load_prompt("judge_question").version
    p = load_prompt("judge_question")
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


# --------------------------------------------------------------------------- one template, two reply formats

# The versions the 20 text/JSON twin files had before each pair became one template with a `### formats` section.
# They are part of every cached reply's key: a change here means every cached reply of that step is asked again,
# so editing a merged template's shared text must be deliberate (update the pin and say so).
PINNED_VERSIONS = {
    ("evaluate_base", "text"): "evaluate_base@9d4016c10b31",
    ("evaluate_base", "json"): "evaluate_base_json@944ca44c395d",
    ("evaluate_cot", "text"): "evaluate_cot@63cbde1e7d05",
    ("evaluate_cot", "json"): "evaluate_cot_json@b36511592042",
    ("evaluate_at_cot", "json"): "evaluate_at_cot@e0e60ff45780",
    ("evaluate_at_cot", "text"): "evaluate_at_cot_text@73a960711314",
    ("evaluate_at_cot_actions", "text"): "evaluate_at_cot_actions@3b6c67bd4592",
    ("evaluate_at_cot_actions", "json"): "evaluate_at_cot_actions_json@035a3de2441e",
    ("evaluate_intent_sim", "json"): "evaluate_intent_sim@8ed1b515e778",
    ("evaluate_intent_sim", "text"): "evaluate_intent_sim_text@ce35183a53df",
    ("evaluate_intent_sim_question", "text"): "evaluate_intent_sim_question@32451a602854",
    ("evaluate_intent_sim_question", "json"): "evaluate_intent_sim_question_json@a386e899d71f",
    ("evaluate_intent_sim_user", "text"): "evaluate_intent_sim_user@4248e2d9dda2",
    ("evaluate_intent_sim_user", "json"): "evaluate_intent_sim_user_json@f0a2618a1655",
    ("evaluate_intent_sim_answer", "text"): "evaluate_intent_sim_answer@49949264fd0c",
    ("evaluate_intent_sim_answer", "json"): "evaluate_intent_sim_answer_json@083db52e561f",
    ("agent_output", "json"): "agent_output@83d6977aab0c",
    ("agent_output", "text"): "agent_output_text@8e611736b4c6",
    ("intents_assistant", "text"): "intents_assistant@c559cfa63db9",
    ("intents_assistant", "json"): "intents_assistant_json@0d72f96e6625",
}
# Sample values and the messages the twin files rendered with them, recorded before the merge.
RECORDED = json.loads((Path(__file__).parent / "prompt_variants.json").read_text())["variants"]


def test_every_format_variant_is_pinned():
    assert sorted(v for v in variants() if v[1] is not None) == sorted(PINNED_VERSIONS)


@pytest.mark.parametrize("variant", sorted(PINNED_VERSIONS), ids=variant_id)
def test_variant_keeps_its_twin_files_version(variant):
    assert load_prompt(*variant).version == PINNED_VERSIONS[variant]


@pytest.mark.parametrize("rec", RECORDED, ids=lambda r: r["old_file"])
def test_variant_renders_what_its_twin_file_rendered(rec):
    assert load_prompt(rec["step"], rec["fmt"]).messages(**rec["values"]) == rec["messages"]


def test_task_carries_the_format():
    text = LLMTask("evaluate_base", role="subject", fmt="text")
    js = LLMTask("evaluate_base", role="subject", fmt="json")
    assert text.version == PINNED_VERSIONS[("evaluate_base", "text")]
    assert js.request({"message": "Hi?"}).prompt_version == PINNED_VERSIONS[("evaluate_base", "json")]
    assert "Reply with JSON only" in js.request({"message": "Hi?"}).messages[0]["content"]


def test_missing_format_names_the_file():
    with pytest.raises(PromptFormatError, match=r"evaluate_base\.txt needs a reply format: one of text, json"):
        load_prompt("evaluate_base")
    with pytest.raises(PromptFormatError, match=r"evaluate_base\.txt"):
        LLMTask("evaluate_base", role="subject").request({"message": "Hi?"})


def test_missing_format_is_not_an_input_error_row():
    """A task without its format is a mistake in the code: run() raises instead of making input_error rows."""
    task = LLMTask("evaluate_base", role="subject")
    with pytest.raises(PromptFormatError):
        task.run(lambda role, reqs: [], ["x"], lambda item: {"message": item})


def test_unknown_format_names_the_file_and_the_format():
    with pytest.raises(PromptFormatError, match=r"evaluate_base\.txt has no format 'xml' \(it has: text, json\)"):
        load_prompt("evaluate_base", "xml")
    with pytest.raises(PromptFormatError, match=r"judge_question\.txt has no '### formats' section, so no format"):
        load_prompt("judge_question", "json")


TWO_FORMATS = """### system
Decide. $rule
### user
$message
### formats
text:
  rule: Start with "The answer is".
json:
  version_name: toy_json
  rule: |-
    Reply with JSON:
    "text" (costs $$5).
"""


def test_formats_fill_only_their_placeholders():
    text, js = parse_prompt("toy", TWO_FORMATS, "text"), parse_prompt("toy", TWO_FORMATS, "json")
    assert text.system == 'Decide. Start with "The answer is".' and text.user == "$message"
    assert js.system == 'Decide. Reply with JSON:\n"text" (costs $$5).'
    assert text.version.startswith("toy@") and js.version.startswith("toy_json@")
    assert js.messages(message="Q?") == [{"role": "system", "content": 'Decide. Reply with JSON:\n"text" (costs $5).'},
                                         {"role": "user", "content": "Q?"}]


@pytest.mark.parametrize(("formats", "problem"), [
    ("text: [a\n", "not valid YAML"),
    ("- text\n", "expected a mapping"),
    ("xml:\n  rule: x\n", "unknown format 'xml'"),
    ("text:\n  rule: [x]\n", "format 'text' must map placeholder names to text"),
    ("text:\n  rule: x\njson:\n  other: y\n", "format 'json' sets ['other'], the others ['rule']"),
    ("text:\n  rule: x\n  extra: y\njson:\n  rule: x\n  extra: y\n", "passages ['extra'] have no placeholder"),
])
def test_bad_formats_section_is_named(formats, problem):
    text = "### system\nDecide. $rule\n### user\n$message\n### formats\n" + formats
    with pytest.raises(PromptFormatError, match=re.escape(problem)) as err:
        parse_prompt("toy", text, "text")
    assert "toy.txt" in str(err.value)
