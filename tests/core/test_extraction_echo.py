"""Issue 27.7: FM-LOG extractions that copy the prompt's demonstrations are rejected as prompt echoes (as the
benchmark's validation removes echoed queries), and a genuine tuple that happens to share words is kept."""

import json

from dagster_project.core.clarilm.extraction import DEMONSTRATIONS, PROMPT_ECHO, parse_extraction


def _reply(c, facet, query="Help me with my text.", refined="Help me with my text, in French."):
    return json.dumps({"is_clarification": True, "query": query, "clarifying_question": c,
                       "refined_query": refined, "facet": facet})


REFINEMENT = {"source": "user_refinement", "query": "Can you help me with my essay?",
              "reply": "It is a history essay about the French revolution, 2000 words.", "clarifying_question": None}


def test_the_demonstrations_are_collected_from_both_prompts():
    for text in ("translate this paragraph into french", "the target job", "platform and package manager",
                 "which city and which airport are you starting from", "the operating system"):
        assert text in DEMONSTRATIONS


def test_a_clarifying_question_copied_from_the_demonstrations_is_a_prompt_echo():
    row = parse_extraction(REFINEMENT, _reply("Translate this paragraph into French.", "essay topic and length"))
    assert (row["kept"], row["reject_reason"], row["status"]) == (False, PROMPT_ECHO, "ok")
    assert "demonstrations" in row["error"]


def test_a_facet_copied_from_the_demonstrations_and_absent_from_the_log_is_a_prompt_echo():
    row = parse_extraction(REFINEMENT, _reply("What is the essay about, and how long should it be?",
                                              "platform and package manager"))
    assert (row["kept"], row["reject_reason"]) == (False, PROMPT_ECHO)


def test_a_genuine_tuple_that_shares_a_demonstration_facet_with_its_log_is_kept():
    cand = {"source": "user_refinement", "query": "How do I install Docker?",
            "reply": "I use Ubuntu as the operating system.", "clarifying_question": None}
    row = parse_extraction(cand, _reply("Which operating system do you use?", "the operating system"))
    assert row["kept"] is True and row["reject_reason"] is None


def test_a_logged_clarifying_question_is_never_an_echo():
    cand = {"source": "assistant_asked", "query": "How do I get to the airport?",
            "clarifying_question": "Which city and which airport are you starting from?",
            "reply": "From Lyon to Saint-Exupery."}
    row = parse_extraction(cand, _reply("Which city and which airport are you starting from?",
                                        "starting city and airport"))
    assert row["kept"] is True and row["c_in_log"] is True
