"""ClariLM §3.2.2, FM-LOG training data: the log-mined (q_i -> f, c) pairs plus the extraction prompts' own positive
demonstrations, as SFT prompt/completion rows in the FM-LOG prompt (`clarilm_fm_log`), rendered the way the facets
group renders it at inference, so the trained `fm_log` model is asked the way it learned (docs/fm-log.md)."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import polars as pl

from dagster_project.core.clarilm.extraction import TASKS
from dagster_project.core.clarilm.facets import FM_LOG, demo_block
from dagster_project.core.training.template import TrainedTemplate
from dagster_project.llm.backends.transformers import with_schema

PAIR_COLUMNS = {"query": pl.Utf8, "facet": pl.Utf8, "clarifying_question": pl.Utf8, "origin": pl.Utf8}
_ITEM = re.compile(r'q_i:\s*"(?P<query>[^"]+)".*?\bc:\s*"(?P<c>[^"]+)".*?\bfacet:\s*"(?P<facet>[^"]+)"', re.DOTALL)


def fm_log_template() -> TrainedTemplate:
    """The FM-LOG prompt as the transformers backend serves it (a trained model needs that backend): the task's
    system and user parts, the user part ending with the backend's schema instruction for the Facet reply; render
    needs `examples` (demo_block). training.json records it, so training and serving see the same text."""
    p = FM_LOG.template
    note = with_schema([{"role": "user", "content": ""}], FM_LOG.schema)[-1]["content"]
    return TrainedTemplate("fm_log", p.system, p.user.rstrip() + note.replace("$", "$$"), "question",
                           'JSON {"facet": ..., "clarifying_question": ...}', "fm_log_facet")


def shipped_demonstrations() -> pl.DataFrame:
    """The positive demonstrations (q_i, c, facet) written into the extraction prompts, origin "shipped"; a prompt
    whose positive block no longer parses raises, naming it (training would silently lose its examples)."""
    rows = []
    for task in TASKS.values():  # the extraction steps of both log sources
        positive = task.template.user.split("= true):", 1)[-1].split("= false):", 1)[0]
        found = [{"query": m["query"], "facet": m["facet"], "clarifying_question": m["c"], "origin": "shipped"}
                 for m in _ITEM.finditer(positive)]
        if not found:
            raise ValueError(f"prompt {task.prompt}.txt: no positive demonstration (q_i: \"...\" c: \"...\" facet: \"...\") "
                             "found in its 'is_clarification = true' block")
        rows += found
    return pl.DataFrame(rows, schema=PAIR_COLUMNS)


def training_pairs(log_pairs: pl.DataFrame) -> pl.DataFrame:
    """The log pairs (fm_log_training_pairs: query, facet, clarifying_question) with origin "log", then the shipped
    demonstrations; a pair without all three texts cannot be a target and is left out of the table's rows."""
    logs = log_pairs.select(*(pl.col(c).cast(pl.Utf8) for c in ("query", "facet", "clarifying_question")),
                            origin=pl.lit("log"))
    return pl.concat([logs, shipped_demonstrations()]).filter(
        pl.all_horizontal(pl.col(c).is_not_null() & (pl.col(c).str.strip_chars() != "")
                          for c in ("query", "facet", "clarifying_question")))


def sft_rows(pairs: pl.DataFrame, demo_pool: pl.DataFrame, n_demos: int, seed: int) -> list[dict[str, Any]]:
    """One prompt/completion row per pair: the FM-LOG prompt for its query with up to n_demos demonstrations drawn
    from demo_pool (the log pairs, as at inference) other than the pair itself, and the reply the facets step
    parses, JSON {"facet", "clarifying_question"}. Leaving the pair out of its own demonstrations keeps the model
    from learning to copy its prompt."""
    rng = random.Random(seed)
    template = fm_log_template()
    pool = demo_pool.select("query", "facet", "clarifying_question").to_dicts()
    rows = []
    for pair in pairs.iter_rows(named=True):
        others = [d for d in pool if d["query"] != pair["query"]]
        demos = demo_block(rng.sample(others, min(n_demos, len(others))))
        reply = json.dumps({"facet": pair["facet"], "clarifying_question": pair["clarifying_question"]})
        rows.append({"prompt": template.render([{"role": "user", "content": pair["query"]}], examples=demos),
                     "completion": [{"role": "assistant", "content": reply}]})
    return rows
