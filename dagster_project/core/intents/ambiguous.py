"""§2.1.1 ambiguous queries from intent-tagged data: the edit method (rewrite + independent verification), the
intent-pair method (one query for two intents, with a clarified version for each), and queries the user provides."""

from __future__ import annotations

import json
from functools import cache
from itertools import combinations
from typing import Annotated, Any

import numpy as np
import polars as pl
from pydantic import ConfigDict, Field, WithJsonSchema

from dagster_project.config import IntentsConfig
from dagster_project.config.groups import EditExample
from dagster_project.core.intents.catalog import SPLITS, Catalog, known_intent, normalize_text, string_enum
from dagster_project.core.intents.utterances import round_robin_sample
from dagster_project.io.formats.intents import as_text, problem_reason, split_list
from dagster_project.io.records import Record
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Outcome, Reply, Status

_REASON = {"type": "string", "maxLength": 80}


@cache
def edit_reply(names: tuple[str, ...]) -> type[Reply]:
    """The edit step's reply; intents are read leniently item by item (an unknown one is a reject reason)."""
    items = {"type": "array", "minItems": 2, "maxItems": 3,
             "items": {"type": "object", "properties": {"intent": string_enum(names), "reason": _REASON},
                       "required": ["intent", "reason"]}}

    class EditReply(Reply):
        modified_query: NonEmpty = Field(json_schema_extra={"minLength": 5, "maxLength": 160})
        potential_intents: Annotated[list[Any], WithJsonSchema(items)]

    return EditReply


@cache
def verify_reply(names: tuple[str, ...]) -> type[Reply]:
    """The verifier's reply: is the edited query ambiguous, and which intents fit (reason optional on reading)."""

    class VerifyReply(Reply):
        model_config = ConfigDict(json_schema_extra={"required": ["ambiguous", "fitting_intents", "reason"]})
        ambiguous: bool
        fitting_intents: Annotated[list[Any], WithJsonSchema({"type": "array", "maxItems": 3,
                                                              "items": string_enum(names)})]
        reason: Annotated[Any, WithJsonSchema(_REASON)] = ""

    return VerifyReply


def _query(max_length: int) -> Any:
    return Field(json_schema_extra={"minLength": 5, "maxLength": max_length})


class PairReply(Reply):
    """The intent-pair step's reply: one ambiguous query and a clarified version for each intent."""

    ambiguous_query: NonEmpty = _query(120)
    query_for_a: NonEmpty = _query(120)
    query_for_b: NonEmpty = _query(120)


EDIT = LLMTask("intents_edit", role="generator", lenient=True, sampling={"max_tokens": 220})
VERIFY = LLMTask("intents_verify", role="judge", lenient=True, sampling={"temperature": 0.0, "max_tokens": 120})
PAIR = LLMTask("intents_pair", role="generator", reply=PairReply, lenient=True, sampling={"max_tokens": 160})

AMBIGUOUS_SCHEMA = {
    "query_id": pl.Utf8, "method": pl.Utf8, "split": pl.Utf8, "group_id": pl.Utf8, "source_utterance_id": pl.Utf8,
    "ambiguous_query": pl.Utf8, "unambiguous_query": pl.Utf8, "true_intent": pl.Utf8,
    "candidate_intents": pl.List(pl.Utf8), "reasons": pl.List(pl.Utf8), "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8, "repaired": pl.Boolean,
    "verified": pl.Boolean, "fitting_intents": pl.List(pl.Utf8), "verify_reason": pl.Utf8, "verify_status": pl.Utf8,
    "verify_raw_output": pl.Utf8, "verify_repaired": pl.Boolean, "kept": pl.Boolean, "reject_reason": pl.Utf8,
}
GENERATED = {k: v for k, v in AMBIGUOUS_SCHEMA.items() if not k.startswith(("verif", "fitting"))}
VERIFICATION = {k: AMBIGUOUS_SCHEMA[k] for k in ("verified", "fitting_intents", "verify_reason", "verify_status",
                                                 "verify_raw_output", "verify_repaired", "reject_reason")}


def _failure(o: Outcome, failed: str, unusable: str) -> str:
    """The reject reason of an outcome without a usable reply: no answer (`failed`) or an unusable one."""
    return f"{unusable if o.status is Status.PARSE_ERROR else failed}: {o.error}"


# --------------------------------------------------------------------------- edit method

def edit_sources(utterances: pl.DataFrame, cfg: IntentsConfig) -> pl.DataFrame:
    """The tagged (in-domain) utterances to rewrite: n_edit_train from train, n_edit_test from test."""
    pool = utterances.filter(~pl.col("is_ood"))
    return pl.concat([round_robin_sample(pool.filter(pl.col("split") == "train"), cfg.n_edit_train, cfg.seed),
                      round_robin_sample(pool.filter(pl.col("split") == "test"), cfg.n_edit_test, cfg.seed + 1)])


def _edit_row(k: int, src: dict[str, Any], o: Outcome, names: list[str]) -> dict[str, Any]:
    row = {"query_id": f"edit-{src['split']}-{k:03d}", "method": "edit", "split": src["split"], "group_id": None,
           "source_utterance_id": src["utterance_id"], "ambiguous_query": None, "unambiguous_query": src["text"],
           "true_intent": src["intent"], "candidate_intents": [], "reasons": [], **o.provenance(repaired=True),
           "kept": False, "reject_reason": None}
    if not o.ok:
        row["reject_reason"] = _failure(o, "generation failed", "unusable reply")
        return row
    cands, reasons, unknown = [], [], []
    for item in o.value.potential_intents:
        name = item.get("intent") if isinstance(item, dict) else item
        known = known_intent(name, names)
        if known is None:
            unknown.append(str(name))
        elif known not in cands:
            cands.append(known)
            reasons.append(str(item.get("reason", "")).strip() if isinstance(item, dict) else "")
    query = " ".join(o.value.modified_query.split())
    row.update(ambiguous_query=query, candidate_intents=cands, reasons=reasons)
    if unknown:
        row["reject_reason"] = f"unknown intent(s) {sorted(unknown)}"
    elif len(cands) < 2:
        row["reject_reason"] = "fewer than two potential intents"
    elif src["intent"] not in cands:
        row["reject_reason"] = "the true intent is not among the potential intents"
    elif normalize_text(query) == normalize_text(src["text"]):
        row["reject_reason"] = "query unchanged"
    else:
        row["kept"] = True  # provisionally: verification decides
    return row


def _example(ex: EditExample, good: bool) -> str:
    """One worked example of the edit prompt: input, the JSON reply, and why it is (not) a good rewrite."""
    reply = json.dumps({"modified_query": ex.modified_query,
                        "potential_intents": [{"intent": k, "reason": v} for k, v in ex.potential_intents.items()]})
    label = "A good rewrite" if good else "A bad rewrite (do not do this)"
    return f'{label}. Input: "{ex.query}" (intent {ex.intent}). Output: {reply}\nWhy: {ex.why}'


def edit_examples(cfg: IntentsConfig) -> str:
    """Fig. 3's positive and negative example, rendered for the edit prompt. They show the reply format and the
    judgement asked for; their intents need not be the catalogue's (the reply schema only admits catalogue
    names), though examples from the user's own domain work best."""
    return "\n\n".join([_example(cfg.edit_positive, True), _example(cfg.edit_negative, False)])


def generate_edits(chat: Chat, sources: pl.DataFrame, catalog: Catalog, cfg: IntentsConfig,
                   seed: int = 0) -> pl.DataFrame:
    """Fig. 3 in our words, with its positive and negative example: rewrite each tagged utterance so that it fits
    two or more intents, naming them. One row per source; kept=False with a reject_reason unless the edit is usable
    (verification next)."""
    task = EDIT.with_reply(edit_reply(tuple(catalog.names)))
    cat = catalog.render(examples_per_intent=cfg.examples_per_intent)
    examples = edit_examples(cfg)
    out = task.run(chat, list(enumerate(sources.iter_rows(named=True))),
                   lambda it: {"catalogue": cat, "query": it[1]["text"], "intent": it[1]["intent"],
                               "examples": examples},
                   lambda it: {"temperature": cfg.generation_temperature, "seed": seed + it[0]})
    rows = [_edit_row(o.item[0], o.item[1], o, catalog.names) for o in out]
    return pl.DataFrame(rows, schema=GENERATED)


def _verdict(true: str, o: Outcome, names: list[str]) -> dict[str, Any]:
    row = {"verified": False, "fitting_intents": [], "verify_reason": None, "verify_status": o.status.value,
           "verify_raw_output": o.raw_output, "verify_repaired": o.repaired, "reject_reason": None}
    if not o.ok:
        row["reject_reason"] = _failure(o, "verification failed", "verification unusable")
        return row
    fitting: list[str] = []
    for n in o.value.fitting_intents:
        k = known_intent(n, names)
        if k and k not in fitting:
            fitting.append(k)
    row.update(fitting_intents=fitting, verify_reason=str(o.value.reason).strip() or None)
    if not o.value.ambiguous:
        row["reject_reason"] = "verifier: not ambiguous"
    elif len(fitting) < 2:
        row["reject_reason"] = "verifier: fewer than two fitting intents"
    elif true not in fitting:
        row["reject_reason"] = "verifier: the true intent is not among the fitting intents"
    else:
        row["verified"] = True
    return row


def verify_edits(chat: Chat, candidates: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """A second, independent call: is the edited query really ambiguous, and between which intents? Kept only when
    the verifier says ambiguous and names at least two fitting intents, the true intent among them (the simulated
    user will steer towards it, so the verifier must find it plausible too)."""
    task = VERIFY.with_reply(verify_reply(tuple(catalog.names)))
    lst = catalog.render(examples_per_intent=0)
    out = task.run(chat, candidates.to_dicts(), lambda r: {"intent_list": lst, "query": r["ambiguous_query"]})
    ext = pl.DataFrame([_verdict(o.item["true_intent"], o, catalog.names) for o in out], schema=VERIFICATION)
    return pl.concat([candidates.drop("reject_reason"), ext], how="horizontal").with_columns(kept=pl.col("verified"))


# --------------------------------------------------------------------------- intent-pair method

def sample_intent_pairs(names: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """n distinct unordered intent pairs in a seeded order (fewer if the catalogue has fewer pairs)."""
    pairs = list(combinations(sorted(names), 2))
    order = np.random.default_rng(seed).permutation(len(pairs))
    return [pairs[i] for i in order[:n]]


def pair_plan(names: list[str], cfg: IntentsConfig) -> pl.DataFrame:
    """The intent pairs to generate for: pair_id, split, intent_a/b, and `coverage` (all | sampled).

    The paper generates a query for every pair; that is done when the catalogue has at most cfg.pair_sample_above
    pairs, split train/test in the n_pair_train : n_pair_test ratio (seeded order). Above it, n_pair_train +
    n_pair_test pairs are sampled, the first n_pair_train for train."""
    total = len(names) * (len(names) - 1) // 2
    if total <= cfg.pair_sample_above:
        pairs = sample_intent_pairs(names, total, cfg.seed)
        wanted = cfg.n_pair_train + cfg.n_pair_test
        n_train = round(total * cfg.n_pair_train / wanted) if wanted else total
        coverage = "all"
    else:
        pairs = sample_intent_pairs(names, cfg.n_pair_train + cfg.n_pair_test, cfg.seed)
        n_train, coverage = cfg.n_pair_train, "sampled"
    split = ["train" if k < n_train else "test" for k in range(len(pairs))]
    return pl.DataFrame([{"pair_id": f"pair-{split[k]}-{k:03d}", "split": split[k], "intent_a": a, "intent_b": b,
                          "coverage": coverage} for k, (a, b) in enumerate(pairs)],
                        schema={"pair_id": pl.Utf8, "split": pl.Utf8, "intent_a": pl.Utf8, "intent_b": pl.Utf8,
                                "coverage": pl.Utf8})


def _pair_values(catalog: Catalog, p: dict[str, Any]) -> dict[str, str]:
    a, b = catalog.get(p["intent_a"]), catalog.get(p["intent_b"])
    return {"intent_a": a.name, "description_a": a.description or a.name, "example_a": (a.examples or (a.name,))[0],
            "intent_b": b.name, "description_b": b.description or b.name, "example_b": (b.examples or (b.name,))[0]}


def _pair_rows(p: dict[str, Any], o: Outcome) -> list[dict[str, Any]]:
    base = {"method": "intent_pair", "split": p["split"], "group_id": p["pair_id"], "source_utterance_id": None,
            "ambiguous_query": None, "candidate_intents": [p["intent_a"], p["intent_b"]], "reasons": [],
            **o.provenance(repaired=True), "kept": False, "reject_reason": None}
    versions: dict[str, str | None] = {"a": None, "b": None}
    if not o.ok:
        base["reject_reason"] = _failure(o, "generation failed", "unusable reply")
    else:
        amb = " ".join(o.value.ambiguous_query.split())
        versions = {"a": " ".join(o.value.query_for_a.split()), "b": " ".join(o.value.query_for_b.split())}
        base["ambiguous_query"] = amb
        if len({normalize_text(amb), normalize_text(versions["a"]), normalize_text(versions["b"])}) < 3:
            base["reject_reason"] = "the ambiguous query and its two versions are not all different"
        else:
            base["kept"] = True
    return [{**base, "query_id": f"{p['pair_id']}-{side}", "unambiguous_query": versions[side],
             "true_intent": p[f"intent_{side}"]} for side in ("a", "b")]


def generate_pairs(chat: Chat, plan: pl.DataFrame, catalog: Catalog, temperature: float,
                   seed: int = 0) -> pl.DataFrame:
    """Two rows per pair (one per intent), sharing the ambiguous query and group_id; failures stay as rows."""
    out = PAIR.run(chat, list(enumerate(plan.iter_rows(named=True))), lambda it: _pair_values(catalog, it[1]),
                   lambda it: {"temperature": temperature, "seed": seed + it[0]})
    return pl.DataFrame([row for o in out for row in _pair_rows(o.item[1], o)], schema=GENERATED)


# --------------------------------------------------------------------------- provided queries and the whole step

def _provided_problem(amb: str | None, una: str | None, true: str | None, raw_true: Any, cands: list,
                      known: list[str], split: str | None, split_raw: str) -> str | None:
    if not amb or not amb.strip() or not una or not una.strip():
        return "missing field 'ambiguous_query' or 'unambiguous_query'"
    if true is None:
        return f"unknown true_intent {raw_true!r}"
    if len(set(known)) < 2 or len(known) != len(cands):
        return "candidate_intents must list at least two catalogue intents"
    if true not in known:
        return "true_intent is not among candidate_intents"
    if split is None:
        return f"unknown split {split_raw!r}"
    return None


def validate_provided_ambiguous(records: list[Record], names: list[str]) -> pl.DataFrame:
    """Ambiguous queries the user already has (e.g. from logs), `method=provided`: ambiguous_query,
    unambiguous_query, true_intent, candidate_intents (list or `|`-separated; at least two catalogue intents
    including the true one) and split (default train). Unusable records stay with kept=false and a reason."""
    rows = []
    for rec in records:
        if rec.problem:
            rows.append({"query_id": f"provided-bad-{rec.record:03d}", "method": "provided", "split": None,
                         "status": Status.OK, "candidate_intents": [], "reasons": [], "kept": False,
                         "reject_reason": problem_reason(rec), "raw_output": rec.raw})
            continue
        r = rec.data
        amb, una = as_text(r.get("ambiguous_query")), as_text(r.get("unambiguous_query"))
        true = known_intent(r.get("true_intent"), names)
        cands = split_list(r.get("candidate_intents") or [])
        known = [k for k in (known_intent(c, names) for c in cands) if k]
        split_raw = as_text(r.get("split")) or "train"
        split = SPLITS.get(split_raw.strip().casefold())
        reason = _provided_problem(amb, una, true, r.get("true_intent"), cands, known, split, split_raw)
        rows.append({"query_id": f"provided-{split or 'bad'}-{rec.record:03d}", "method": "provided",
                     "split": split, "ambiguous_query": " ".join((amb or "").split()) or None,
                     "unambiguous_query": " ".join((una or "").split()) or None, "true_intent": true,
                     "candidate_intents": list(dict.fromkeys(known)), "reasons": [], "status": Status.OK,
                     "kept": reason is None, "reject_reason": reason})
    return pl.DataFrame(rows, schema=GENERATED)


def combine_ambiguous(*parts: pl.DataFrame | None) -> pl.DataFrame:
    """All methods in one table with the full column set (edit rows carry verification columns)."""
    frames = [f for f in parts if f is not None and f.height]
    out = pl.concat([pl.DataFrame(schema=AMBIGUOUS_SCHEMA), *frames], how="diagonal_relaxed")
    return out.select(list(AMBIGUOUS_SCHEMA)).sort("query_id")


def ambiguous_queries(chat: Chat, catalog: Catalog, utterances: pl.DataFrame, cfg: IntentsConfig,
                      generator_seed: int, provided: list[Record] | None = None) -> pl.DataFrame:
    """Both methods (`method`: edit | intent_pair) plus the provided queries, with `source` (generated or the file)."""
    edits = generate_edits(chat, edit_sources(utterances, cfg), catalog, cfg, generator_seed)
    verified = verify_edits(chat, edits.filter(pl.col("kept")), catalog)
    edits = pl.concat([verified, edits.filter(~pl.col("kept"))], how="diagonal_relaxed")
    pairs = generate_pairs(chat, pair_plan(catalog.names, cfg), catalog, cfg.generation_temperature, generator_seed)
    given = validate_provided_ambiguous(provided, catalog.names) if provided is not None else None
    return combine_ambiguous(edits, pairs, given).with_columns(
        source=pl.when(pl.col("method") == "provided").then(pl.lit(cfg.ambiguous_dataset))
        .otherwise(pl.lit("generated")))
