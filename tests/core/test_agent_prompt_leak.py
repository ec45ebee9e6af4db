"""Issue 27.2: ClarifyAgent is not told how the reference labels were made. Its prompts (as sent, every persona
forecast included) never reuse the user simulator's persona descriptions or prompts, and never state the
reference-action rule (which user types get an answer and which a question)."""

import re

import pytest

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.clarify_agent import USER_TYPES, ClarifyAgent, user_types
from dagster_project.core.clarifymt.agent.modules import MODULES, OUTPUT_TEXT, TASKS
from dagster_project.core.shared.taxonomy import PERSONAS
from dagster_project.llm.prompts import load_prompt
from tests.core.test_agent_methods import A1, Chat, agent_reply, turn

SIMULATOR_PROMPTS = ("simulate_two_turn", "simulate_three_turn")
ACTION_WORDS = re.compile(r"\b(answer\w*|ask\w*|clarif\w*|go ahead|proceed\w*)\b", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _shingles(text: str, k: int) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + k]) for i in range(len(w) - k + 1)}


def sent_by_agent(persona: str) -> dict[str, str]:
    """What ClarifyAgent actually sends on turns 1 and 2 when the Forecaster reports `persona`, per module."""
    chat = Chat(agent_reply("unfilled", persona=persona))
    ClarifyAgent(EvaluationConfig()).predict([turn("d", 1), turn("d", 2, A1)], chat)
    sent: dict[str, str] = {}
    for batch in chat.batches:
        for r in batch:
            module = r.prompt_version.split("@")[0]
            sent[module] = sent.get(module, "") + "\n".join(m["content"] for m in r.messages) + "\n"
    return sent


def agent_texts() -> dict[str, str]:
    """Every text the agent's modules can send: the templates, and the requests of a run for each forecast."""
    texts = {m: TASKS[m].template.system + "\n" + TASKS[m].template.user for m in MODULES}
    texts["output_text"] = OUTPUT_TEXT.template.system + "\n" + OUTPUT_TEXT.template.user
    texts["forecaster_types"] = user_types()
    for p in PERSONAS:
        texts |= {f"{module}[{p.key}]": text for module, text in sent_by_agent(p.key).items()}
    return texts


def _persona_mentions(sentence: str) -> list[str]:
    s = " ".join(_words(sentence))
    names = {p.key: {p.key.replace("_", " "), " ".join(_words(p.name))} for p in PERSONAS}
    return [k for k, variants in names.items() if any(re.search(rf"\b{v}\b", s) for v in variants)]


@pytest.mark.parametrize("persona", PERSONAS, ids=lambda p: p.key)
def test_no_agent_prompt_reuses_a_simulator_persona_description(persona):
    behaviour = persona.behaviour
    for name, text in agent_texts().items():
        assert behaviour.lower().rstrip(".") not in text.lower(), name
        shared = _shingles(behaviour, 4) & _shingles(text, 4)
        assert not shared, (name, persona.key, shared)


def test_no_agent_prompt_reuses_the_simulator_prompts():
    for sim in SIMULATOR_PROMPTS:
        p = load_prompt(sim)
        sim_shingles = _shingles(p.system + "\n" + p.user, 5)
        for name, text in agent_texts().items():
            assert not (sim_shingles & _shingles(text, 5)), (name, sim)


def test_no_agent_prompt_states_the_reference_action_rule():
    """No sentence pairs a user type with an action (the rule precise/refusal -> answer, the others -> clarify)."""
    for name, text in agent_texts().items():
        for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
            if _persona_mentions(sentence):
                assert not ACTION_WORDS.search(sentence), (name, sentence)


def test_the_planner_request_is_the_same_for_every_forecast_but_the_label():
    sent = {p.key: sent_by_agent(p.key)["agent_planner"].replace(p.key, "<TYPE>") for p in PERSONAS}
    assert len(set(sent.values())) == 1


def test_the_forecaster_glosses_every_persona_label_and_only_those():
    assert list(USER_TYPES) == [p.key for p in PERSONAS]
