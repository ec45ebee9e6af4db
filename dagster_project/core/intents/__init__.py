"""Intent classification with clarification (seed: "Scaling Intent Understanding", Nandi et al.).

§2.1.1 ambiguous queries from intent-tagged data (edit + verification; intent pair), §2.1.2 assistant / user
simulation, §2.3 with Appendices D/E turn scoring (ARS, five quality ratings) and SDRS, Appendix A top-percentile
curation, §2.2.1 label-dropout OOD, Appendix C training format (TRL `messages`).

Pure Python: data in, data out. The one place that reaches an LLM is the `chat(role, requests)` callable that the
caller passes in (the Dagster asset hands in `LLMResource.chat`; tests hand in a script).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from dagster_project.llm.chat import ChatRequest, ChatResult, Message
from dagster_project.core.intents.metrics import QUALITY_SCALES, ambiguity_resolution_score, sdrs, turn_quality
from dagster_project.llm.parsing import parse_json_object as _strict_json
from dagster_project.llm.parsing import require_fields
from dagster_project.llm.prompts import load_prompt

Chat = Callable[[str, list[ChatRequest]], list[ChatResult]]

OOD_TARGET = "out of domain"  # what the assistant says (and is trained to say) for an out-of-domain message
SPLITS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val",
          "test": "test"}
ACTIONS = ("intent", "clarify", "out_of_domain", "invalid")
# Conversation outcomes. The first four are the assistant's doing and are scored; the last two are not.
OUTCOMES = ("correct", "wrong_intent", "max_turns", "invalid_reply", "llm_error", "user_error")
SCORED_OUTCOMES = ("correct", "wrong_intent", "max_turns", "invalid_reply")
PREDICTION_OUTCOMES = ("correct", "wrong_intent")  # the conversation ended with an intent or "out of domain"
MESSAGE_TYPE = pl.List(pl.Struct({"role": pl.Utf8, "content": pl.Utf8}))


class InputFileError(ValueError):
    """An input file cannot be used at all; the message names the file (and record / field where known)."""


# --------------------------------------------------------------------------- reading input files

def read_records(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records, malformed) from CSV / TSV / JSONL / JSON / YAML / Parquet; each gets `_record` (1-based).

    A JSONL line that is not a JSON object is a malformed record (with `reason`), not a fatal error; bytes that are
    not UTF-8 become U+FFFD so that the record can be quarantined for bad encoding. An unreadable file raises
    InputFileError naming it.
    """
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{p}: file not found")
    suffix = p.suffix.lower()
    malformed: list[dict[str, Any]] = []
    try:
        if suffix in (".csv", ".tsv"):
            df = pl.read_csv(p, separator="\t" if suffix == ".tsv" else ",", infer_schema=False,
                             encoding="utf8-lossy", truncate_ragged_lines=True)
            rows = df.to_dicts()
        elif suffix in (".jsonl", ".ndjson"):
            rows = []
            for i, line in enumerate(p.read_bytes().splitlines(), 1):
                text = line.decode("utf-8", errors="replace")
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as err:
                    malformed.append({"_record": i, "reason": f"malformed JSON: {err.msg} at char {err.pos}",
                                      "raw": text[:500]})
                    continue
                if not isinstance(obj, dict):
                    malformed.append({"_record": i, "reason": f"expected a JSON object, got {type(obj).__name__}",
                                      "raw": text[:500]})
                    continue
                rows.append({**obj, "_record": i})
            return rows, malformed
        elif suffix in (".json", ".yaml", ".yml"):
            text = p.read_bytes().decode("utf-8", errors="replace")
            data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
            if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
                data = next(iter(data.values()))  # {"intents": [...]} or {"utterances": [...]}
            if not isinstance(data, list):
                raise InputFileError(f"{p}: expected a list of records (or one key holding a list)")
            rows = []
            for i, obj in enumerate(data, 1):
                if isinstance(obj, dict):
                    rows.append({**obj, "_record": i})
                else:
                    malformed.append({"_record": i, "reason": f"expected an object, got {type(obj).__name__}",
                                      "raw": str(obj)[:500]})
            return rows, malformed
        elif suffix == ".parquet":
            rows = pl.read_parquet(p).to_dicts()
        else:
            raise InputFileError(f"{p}: unsupported format {suffix!r}; use .csv, .tsv, .jsonl, .json, .yaml or .parquet")
    except InputFileError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure names the file
        raise InputFileError(f"{p}: cannot be read: {type(err).__name__}: {err}") from None
    return [{**r, "_record": i} for i, r in enumerate(rows, 1)], malformed


def parse_json_object(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """core.parsing's JSON reader, plus one lenient retry: grammar-constrained small models sometimes put a raw
    newline or tab inside a JSON string, which strict JSON forbids but which carries no ambiguity."""
    obj, err = _strict_json(raw)
    if obj is None and err and "control character" in err:
        text = raw or ""
        start, end = text.find("{"), text.rfind("}")
        try:
            cand = json.loads(text[start:end + 1], strict=False)
        except json.JSONDecodeError:
            return None, err
        if isinstance(cand, dict):
            return cand, None
    return obj, err


def _bad_encoding(text: str) -> bool:
    """U+FFFD (undecodable bytes) or control characters other than tab / newline."""
    return "\ufffd" in text or any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text)


def normalize_text(text: str) -> str:
    """Case-folded, whitespace-collapsed text: the key for exact-duplicate detection."""
    return " ".join(text.casefold().split())


def _name_key(name: str) -> str:
    """Intent names compare case-, space-, underscore- and hyphen-insensitively."""
    return " ".join(re.sub(r"[_\-]+", " ", name.casefold()).split())


# --------------------------------------------------------------------------- intent catalogue

@dataclass(frozen=True)
class Intent:
    name: str
    description: str
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    intents: tuple[Intent, ...]

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.intents]

    def get(self, name: str) -> Intent:
        for i in self.intents:
            if i.name == name:
                return i
        raise KeyError(name)

    def render(self, names: list[str] | tuple[str, ...] | None = None, examples_per_intent: int = 2) -> str:
        """One line per intent: `- name: description; e.g. "..." | "..."`."""
        lines = []
        for i in self.intents:
            if names is not None and i.name not in names:
                continue
            line = f"- {i.name}: {i.description}" if i.description else f"- {i.name}"
            ex = i.examples[:examples_per_intent]
            if ex:
                line += "; e.g. " + " | ".join(f'"{e}"' for e in ex)
            lines.append(line)
        return "\n".join(lines)

    @staticmethod
    def from_frame(df: pl.DataFrame) -> Catalog:
        kept = df.filter(pl.col("kept"))
        return Catalog(tuple(Intent(r["intent"], r["description"] or "", tuple(r["examples"] or []))
                             for r in kept.iter_rows(named=True)))


def validate_catalog(records: list[dict], malformed: list[dict], source: str, ood_label: str) -> pl.DataFrame:
    """One row per catalogue record: intent, description, examples, kept, reject_reason (never dropped).

    Needs `name` (or `intent`); `examples` is a list of strings or one string separated by `|`. Raises
    InputFileError naming the file when no intent survives.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for m in malformed:
        rows.append({"intent": None, "description": None, "examples": [], "record": m["_record"], "kept": False,
                     "reject_reason": m["reason"]})
    for r in records:
        name = r.get("name", r.get("intent"))
        desc = r.get("description")
        ex = r.get("examples")
        row = {"intent": name if isinstance(name, str) else None, "description": desc if isinstance(desc, str) else None,
               "examples": [], "record": r["_record"], "kept": False, "reject_reason": None}
        if isinstance(ex, str):
            ex = [e.strip() for e in ex.split("|") if e.strip()]
        if not isinstance(name, str) or not name.strip():
            row["reject_reason"] = "missing field 'name'"
        elif "\n" in name or len(name) > 80 or _bad_encoding(name):
            row["reject_reason"] = "field 'name' must be one line of at most 80 characters"
        elif _name_key(name) in (_name_key(ood_label), _name_key(OOD_TARGET)):
            row["reject_reason"] = f"intent name {name!r} is reserved for out-of-domain"
        elif ex is not None and not (isinstance(ex, list) and all(isinstance(e, str) for e in ex)):
            row["reject_reason"] = "field 'examples' must be a list of strings or a '|'-separated string"
        elif desc is not None and not isinstance(desc, str):
            row["reject_reason"] = "field 'description' must be a string"
        elif _name_key(name) in seen:
            row["reject_reason"] = f"duplicate intent name (first at record {seen[_name_key(name)]})"
        else:
            row.update(intent=name.strip(), description=(desc or "").strip(), kept=True,
                       examples=[" ".join(e.split()) for e in (ex or []) if e.strip()])
            seen[_name_key(name)] = r["_record"]
        rows.append(row)
    out = pl.DataFrame(rows, schema={"intent": pl.Utf8, "description": pl.Utf8, "examples": pl.List(pl.Utf8),
                                     "record": pl.Int64, "kept": pl.Boolean, "reject_reason": pl.Utf8})
    if not out["kept"].any():
        reasons = "; ".join(f"record {r['record']}: {r['reject_reason']}" for r in out.head(5).to_dicts())
        raise InputFileError(f"{source}: no usable intent in the catalogue ({reasons or 'file is empty'})")
    return out.with_columns(n_examples=pl.col("examples").list.len(), source=pl.lit(source)).sort("record")


# --------------------------------------------------------------------------- intent-tagged utterances

UTTERANCE_SCHEMA = {"utterance_id": pl.Utf8, "text": pl.Utf8, "intent": pl.Utf8, "split": pl.Utf8,
                    "is_ood": pl.Boolean, "record": pl.Int64}
REJECTED_SCHEMA = {"record": pl.Int64, "text": pl.Utf8, "intent": pl.Utf8, "split": pl.Utf8, "reason": pl.Utf8}


def _as_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value if isinstance(value, str) else str(value)


def validate_utterances(records: list[dict], malformed: list[dict], source: str, intents: list[str], ood_label: str,
                        test_fraction: float, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, rejected). Rejected reasons: empty text, bad encoding, missing / unknown intent, unknown split,
    duplicate (case- and whitespace-insensitive) of an earlier kept record, malformed record.

    Rows whose intent is `ood_label` are kept as out-of-domain test utterances (`is_ood`). Rows without a split get
    one: per intent, a seeded shuffle sends round(test_fraction * n) to test. Raises InputFileError naming the file
    when the `text` or `intent` field is absent from every record.
    """
    for fld in ("text", "intent"):
        if records and not any(fld in r for r in records):
            cols = sorted({k for r in records for k in r if k != "_record"})
            raise InputFileError(f"{source}: no field {fld!r} in any record (fields found: {cols})")
    known = {_name_key(n): n for n in intents}
    ood_key = _name_key(ood_label)
    kept, rejected = [], []
    seen: dict[str, int] = {}
    for m in malformed:
        rejected.append({"record": m["_record"], "text": m.get("raw"), "intent": None, "split": None,
                         "reason": m["reason"]})
    for r in records:
        text, intent, split = _as_text(r.get("text")), _as_text(r.get("intent")), _as_text(r.get("split"))
        base = {"record": r["_record"], "text": text, "intent": intent, "split": split}
        clean = " ".join((text or "").split())
        split_key = SPLITS.get((split or "").strip().casefold()) if split and split.strip() else None
        if not clean:
            reason = "empty text"
        elif _bad_encoding(text):
            reason = "bad encoding (undecodable bytes or control characters in text)"
        elif not intent or not intent.strip():
            reason = "missing intent"
        elif _name_key(intent) not in known and _name_key(intent) != ood_key:
            reason = f"unknown intent {intent.strip()!r} (not in the catalogue, not {ood_label!r})"
        elif split and split.strip() and split_key is None:
            reason = f"unknown split {split!r} (use train, val or test)"
        elif normalize_text(clean) in seen:
            reason = f"duplicate of record {seen[normalize_text(clean)]}"
        else:
            reason = None
        if reason:
            rejected.append({**base, "reason": reason})
            continue
        seen[normalize_text(clean)] = r["_record"]
        is_ood = _name_key(intent) == ood_key
        kept.append({"utterance_id": f"u{r['_record']:05d}", "text": clean,
                     "intent": ood_label if is_ood else known[_name_key(intent)],
                     "split": split_key, "is_ood": is_ood, "record": r["_record"]})
    rng = np.random.default_rng(seed)
    by_intent: dict[str, list[dict]] = defaultdict(list)
    for row in kept:
        if row["split"] is None:
            by_intent[row["intent"]].append(row)
    for name in sorted(by_intent):
        group = by_intent[name]
        n_test = math.floor(test_fraction * len(group) + 0.5)
        order = rng.permutation(len(group))
        for rank, idx in enumerate(order):
            group[idx]["split"] = "test" if rank < n_test else "train"
    kept_df = pl.DataFrame(kept, schema=UTTERANCE_SCHEMA).with_columns(source=pl.lit(source))
    rej_df = pl.DataFrame(rejected, schema=REJECTED_SCHEMA).with_columns(source=pl.lit(source)).sort("record")
    return kept_df, rej_df


def round_robin_sample(df: pl.DataFrame, n: int, seed: int, by: str = "intent") -> pl.DataFrame:
    """n rows spread over the `by` groups: groups in a seeded order, each group shuffled, then taken in turns."""
    if n <= 0 or df.is_empty():
        return df.head(0)
    rng = np.random.default_rng(seed)
    groups = {k: g for (k,), g in df.sort("utterance_id").group_by([by], maintain_order=True)}
    keys = sorted(groups)
    keys = [keys[i] for i in rng.permutation(len(keys))]
    queues = {k: [groups[k].row(int(i), named=True) for i in rng.permutation(groups[k].height)] for k in keys}
    picked: list[dict] = []
    while len(picked) < n and any(queues.values()):
        for k in keys:
            if queues[k] and len(picked) < n:
                picked.append(queues[k].pop(0))
    return pl.DataFrame(picked, schema=df.schema)


# --------------------------------------------------------------------------- ambiguous queries: edit method

_REASON = {"type": "string", "maxLength": 80}


def edit_schema(names: list[str]) -> dict:
    return {
        "type": "object",
        "properties": {
            "modified_query": {"type": "string", "minLength": 5, "maxLength": 160},
            "potential_intents": {
                "type": "array", "minItems": 2, "maxItems": 3,
                "items": {"type": "object", "properties": {"intent": {"type": "string", "enum": names},
                                                           "reason": _REASON},
                          "required": ["intent", "reason"]},
            },
        },
        "required": ["modified_query", "potential_intents"],
    }


def verify_schema(names: list[str]) -> dict:
    return {
        "type": "object",
        "properties": {
            "ambiguous": {"type": "boolean"},
            "fitting_intents": {"type": "array", "maxItems": 3, "items": {"type": "string", "enum": names}},
            "reason": _REASON,
        },
        "required": ["ambiguous", "fitting_intents", "reason"],
    }


AMBIGUOUS_SCHEMA = {
    "query_id": pl.Utf8, "method": pl.Utf8, "split": pl.Utf8, "group_id": pl.Utf8, "source_utterance_id": pl.Utf8,
    "ambiguous_query": pl.Utf8, "unambiguous_query": pl.Utf8, "true_intent": pl.Utf8,
    "candidate_intents": pl.List(pl.Utf8), "reasons": pl.List(pl.Utf8), "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8, "verified": pl.Boolean,
    "fitting_intents": pl.List(pl.Utf8), "verify_reason": pl.Utf8, "verify_status": pl.Utf8,
    "verify_raw_output": pl.Utf8, "kept": pl.Boolean, "reject_reason": pl.Utf8,
}


GENERATED_COLUMNS = ["query_id", "method", "split", "group_id", "source_utterance_id", "ambiguous_query",
                     "unambiguous_query", "true_intent", "candidate_intents", "reasons", "status", "error",
                     "raw_output", "model", "prompt_version", "kept", "reject_reason"]


def edit_requests(sources: pl.DataFrame, catalog: Catalog, examples_per_intent: int, temperature: float,
                  seed: int = 0) -> list[ChatRequest]:
    """Fig. 3 in our words: rewrite one tagged utterance so that it fits two or more intents, naming them."""
    prompt = load_prompt("intents_edit")
    cat = catalog.render(examples_per_intent=examples_per_intent)
    return [ChatRequest.of(prompt.messages(catalogue=cat, query=r["text"], intent=r["intent"]), prompt.version,
                           edit_schema(catalog.names), temperature=temperature, seed=seed + i, max_tokens=220)
            for i, r in enumerate(sources.iter_rows(named=True))]


def _known_intent(name: Any, names: list[str]) -> str | None:
    if not isinstance(name, str):
        return None
    lookup = {_name_key(n): n for n in names}
    return lookup.get(_name_key(name))


def parse_edits(sources: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult],
                names: list[str]) -> pl.DataFrame:
    """One row per source utterance; kept=False with a reject_reason unless the edit is usable (verification next)."""
    rows = []
    for k, (src, req, res) in enumerate(zip(sources.iter_rows(named=True), requests, results, strict=True)):
        row = {"query_id": f"edit-{src['split']}-{k:03d}", "method": "edit", "split": src["split"],
               "group_id": None, "source_utterance_id": src["utterance_id"], "ambiguous_query": None,
               "unambiguous_query": src["text"], "true_intent": src["intent"], "candidate_intents": [],
               "reasons": [], "status": "ok", "error": None, "raw_output": res.text, "model": res.model,
               "prompt_version": req.prompt_version, "kept": False, "reject_reason": None}
        if res.error:
            row.update(status="llm_error", error=res.error, reject_reason=f"generation failed: {res.error}")
            rows.append(row)
            continue
        obj, err = parse_json_object(res.text)
        err = err or require_fields(obj, {"modified_query": str, "potential_intents": list})
        if err:
            row.update(status="parse_error", error=err, reject_reason=f"unusable reply: {err}")
            rows.append(row)
            continue
        cands, reasons, unknown = [], [], []
        for item in obj["potential_intents"]:
            name = item.get("intent") if isinstance(item, dict) else item
            known = _known_intent(name, names)
            if known is None:
                unknown.append(str(name))
            elif known not in cands:
                cands.append(known)
                reasons.append(str(item.get("reason", "")).strip() if isinstance(item, dict) else "")
        query = " ".join(obj["modified_query"].split())
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
        rows.append(row)
    return pl.DataFrame(rows, schema={k: AMBIGUOUS_SCHEMA[k] for k in GENERATED_COLUMNS})


def verify_requests(candidates: pl.DataFrame, catalog: Catalog) -> list[ChatRequest]:
    """A second, independent call: is the edited query really ambiguous, and between which intents?"""
    prompt = load_prompt("intents_verify")
    lst = catalog.render(examples_per_intent=0)
    return [ChatRequest.of(prompt.messages(intent_list=lst, query=r["ambiguous_query"]), prompt.version,
                           verify_schema(catalog.names), temperature=0.0, max_tokens=120)
            for r in candidates.iter_rows(named=True)]


def apply_verification(candidates: pl.DataFrame, results: list[ChatResult], names: list[str]) -> pl.DataFrame:
    """Keep a candidate only when the verifier says ambiguous and names at least two fitting intents, the true
    intent among them (the simulated user will steer towards it, so the verifier must find it plausible too)."""
    extra = []
    for true, res in zip(candidates["true_intent"].to_list(), results, strict=True):
        row = {"verified": False, "fitting_intents": [], "verify_reason": None, "verify_status": "ok",
               "verify_raw_output": res.text, "reject_reason": None}
        if res.error:
            row.update(verify_status="llm_error", reject_reason=f"verification failed: {res.error}")
        else:
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"ambiguous": bool, "fitting_intents": list})
            if err:
                row.update(verify_status="parse_error", reject_reason=f"verification unusable: {err}")
            else:
                fitting = []
                for n in obj["fitting_intents"]:
                    k = _known_intent(n, names)
                    if k and k not in fitting:
                        fitting.append(k)
                row.update(fitting_intents=fitting, verify_reason=str(obj.get("reason", "")).strip() or None)
                if not obj["ambiguous"]:
                    row["reject_reason"] = "verifier: not ambiguous"
                elif len(fitting) < 2:
                    row["reject_reason"] = "verifier: fewer than two fitting intents"
                elif true not in fitting:
                    row["reject_reason"] = "verifier: the true intent is not among the fitting intents"
                else:
                    row["verified"] = True
        extra.append(row)
    ext = pl.DataFrame(extra, schema={k: AMBIGUOUS_SCHEMA[k] for k in
                                      ("verified", "fitting_intents", "verify_reason", "verify_status",
                                       "verify_raw_output", "reject_reason")})
    out = pl.concat([candidates.drop("reject_reason"), ext], how="horizontal")
    return out.with_columns(kept=pl.col("verified"))


# --------------------------------------------------------------------------- ambiguous queries: intent-pair method

PAIR_SCHEMA = {
    "type": "object",
    "properties": {"ambiguous_query": {"type": "string", "minLength": 5, "maxLength": 120},
                   "query_for_a": {"type": "string", "minLength": 5, "maxLength": 120},
                   "query_for_b": {"type": "string", "minLength": 5, "maxLength": 120}},
    "required": ["ambiguous_query", "query_for_a", "query_for_b"],
}


def sample_intent_pairs(names: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """n distinct unordered intent pairs in a seeded order (fewer if the catalogue has fewer pairs)."""
    pairs = list(combinations(sorted(names), 2))
    order = np.random.default_rng(seed).permutation(len(pairs))
    return [pairs[i] for i in order[:n]]


def pair_requests(plan: pl.DataFrame, catalog: Catalog, temperature: float, seed: int = 0) -> list[ChatRequest]:
    prompt = load_prompt("intents_pair")
    reqs = []
    for i, r in enumerate(plan.iter_rows(named=True)):
        a, b = catalog.get(r["intent_a"]), catalog.get(r["intent_b"])
        msgs = prompt.messages(intent_a=a.name, description_a=a.description or a.name,
                               example_a=(a.examples or (a.name,))[0], intent_b=b.name,
                               description_b=b.description or b.name, example_b=(b.examples or (b.name,))[0])
        reqs.append(ChatRequest.of(msgs, prompt.version, PAIR_SCHEMA, temperature=temperature, seed=seed + i,
                                   max_tokens=160))
    return reqs


def parse_pairs(plan: pl.DataFrame, requests: list[ChatRequest], results: list[ChatResult]) -> pl.DataFrame:
    """Two rows per pair (one per intent), sharing the ambiguous query and group_id; failures stay as rows."""
    rows = []
    for p, req, res in zip(plan.iter_rows(named=True), requests, results, strict=True):
        base = {"method": "intent_pair", "split": p["split"], "group_id": p["pair_id"], "source_utterance_id": None,
                "ambiguous_query": None, "candidate_intents": [p["intent_a"], p["intent_b"]], "reasons": [],
                "status": "ok", "error": None, "raw_output": res.text, "model": res.model,
                "prompt_version": req.prompt_version, "kept": False, "reject_reason": None}
        versions: dict[str, str | None] = {"a": None, "b": None}
        if res.error:
            base.update(status="llm_error", error=res.error, reject_reason=f"generation failed: {res.error}")
        else:
            obj, err = parse_json_object(res.text)
            err = err or require_fields(obj, {"ambiguous_query": str, "query_for_a": str, "query_for_b": str})
            if err:
                base.update(status="parse_error", error=err, reject_reason=f"unusable reply: {err}")
            else:
                amb = " ".join(obj["ambiguous_query"].split())
                versions = {"a": " ".join(obj["query_for_a"].split()), "b": " ".join(obj["query_for_b"].split())}
                base["ambiguous_query"] = amb
                keys = {normalize_text(amb), normalize_text(versions["a"]), normalize_text(versions["b"])}
                if len(keys) < 3:
                    base["reject_reason"] = "the ambiguous query and its two versions are not all different"
                else:
                    base["kept"] = True
        for side in ("a", "b"):
            rows.append({**base, "query_id": f"{p['pair_id']}-{side}", "unambiguous_query": versions[side],
                         "true_intent": p[f"intent_{side}"]})
    return pl.DataFrame(rows, schema={k: AMBIGUOUS_SCHEMA[k] for k in GENERATED_COLUMNS})


def validate_provided_ambiguous(records: list[dict], malformed: list[dict], names: list[str]) -> pl.DataFrame:
    """Ambiguous queries the user already has (e.g. from logs), `method=provided`: ambiguous_query,
    unambiguous_query, true_intent, candidate_intents (list or `|`-separated; at least two catalogue intents
    including the true one) and split (default train). Unusable records stay with kept=false and a reason."""
    rows = []
    for m in malformed:
        rows.append({"query_id": f"provided-bad-{m['_record']:03d}", "method": "provided", "split": None,
                     "status": "ok", "candidate_intents": [], "reasons": [], "kept": False,
                     "reject_reason": m["reason"], "raw_output": m.get("raw")})
    for r in records:
        amb, una = _as_text(r.get("ambiguous_query")), _as_text(r.get("unambiguous_query"))
        true = _known_intent(r.get("true_intent"), names)
        cands = r.get("candidate_intents") or []
        if isinstance(cands, str):
            cands = [c.strip() for c in cands.split("|") if c.strip()]
        known = [k for k in (_known_intent(c, names) for c in cands) if k]
        split_raw = _as_text(r.get("split")) or "train"
        split = SPLITS.get(split_raw.strip().casefold())
        reason = None
        if not amb or not amb.strip() or not una or not una.strip():
            reason = "missing field 'ambiguous_query' or 'unambiguous_query'"
        elif true is None:
            reason = f"unknown true_intent {r.get('true_intent')!r}"
        elif len(set(known)) < 2 or len(known) != len(cands):
            reason = "candidate_intents must list at least two catalogue intents"
        elif true not in known:
            reason = "true_intent is not among candidate_intents"
        elif split is None:
            reason = f"unknown split {split_raw!r}"
        rows.append({"query_id": f"provided-{split or 'bad'}-{r['_record']:03d}", "method": "provided",
                     "split": split, "ambiguous_query": " ".join((amb or "").split()) or None,
                     "unambiguous_query": " ".join((una or "").split()) or None, "true_intent": true,
                     "candidate_intents": list(dict.fromkeys(known)), "reasons": [], "status": "ok",
                     "kept": reason is None, "reject_reason": reason})
    out = pl.DataFrame(rows, schema={k: AMBIGUOUS_SCHEMA[k] for k in GENERATED_COLUMNS}) if rows else None
    return out if out is not None else pl.DataFrame(schema={k: AMBIGUOUS_SCHEMA[k] for k in GENERATED_COLUMNS})


def combine_ambiguous(edits: pl.DataFrame, pairs: pl.DataFrame, provided: pl.DataFrame | None = None) -> pl.DataFrame:
    """All methods in one table with the full column set (edit rows carry verification columns)."""
    frames = [f for f in (edits, pairs, provided) if f is not None and f.height]
    empty = pl.DataFrame(schema=AMBIGUOUS_SCHEMA)
    out = pl.concat([empty, *frames], how="diagonal_relaxed")
    return out.select(list(AMBIGUOUS_SCHEMA)).sort("query_id")


# --------------------------------------------------------------------------- the assistant's replies

@dataclass(frozen=True)
class AssistantReply:
    action: str  # intent | clarify | out_of_domain | invalid
    text: str  # canonical: the intent name, the question, "out of domain", or the raw reply when invalid
    intent: str | None = None
    error: str | None = None


_LEAD_RE = re.compile(r"^[\s\"'*_`>#]*(?:assistant\s*:\s*)?(?:intent\s*:\s*)?[\s\"'*_`]*", re.IGNORECASE)
_OOD_KEYS = {"out of domain", "ood", "out of scope"}


def _assistant_json(obj: dict, candidates: list[str]) -> AssistantReply:
    action = _name_key(str(obj.get("action", "")))
    if action in ("predict intent", "intent", "predict"):
        name = _known_intent(obj.get("intent"), candidates)
        if name is None:
            return AssistantReply("invalid", json.dumps(obj), error=f"intent {obj.get('intent')!r} not in the list")
        return AssistantReply("intent", name, intent=name)
    if action in ("ask clarifying question", "clarify", "ask", "clarifying question"):
        q = " ".join(str(obj.get("question") or "").split())
        if not q:
            return AssistantReply("invalid", json.dumps(obj), error="empty clarifying question")
        return AssistantReply("clarify", q)
    if action in _OOD_KEYS:
        return AssistantReply("out_of_domain", OOD_TARGET)
    return AssistantReply("invalid", json.dumps(obj), error=f"unknown action {obj.get('action')!r}")


def parse_assistant_reply(raw: str | None, candidates: list[str]) -> AssistantReply:
    """An intent name, a clarifying question, "out of domain", or invalid. Never raises.

    JSON replies ({"action", "intent", "question"}) are read first. Plain text (the paper's protocol): a reply that
    is a candidate name (case / `_` / `-` insensitive, optional "intent:" label) is that intent; one containing
    "out of domain" is OOD; one with a question mark is a clarifying question; a reply without a question mark
    that names exactly one candidate is that intent; anything else is invalid.
    """
    text = (raw or "").strip()
    if not text:
        return AssistantReply("invalid", "", error="empty reply")
    if text.startswith("{") or text.startswith("```"):
        obj, err = parse_json_object(text)
        if obj is not None and "action" in obj:
            return _assistant_json(obj, candidates)
    body = _LEAD_RE.sub("", text, count=1).strip().strip("\"'*_` ")
    key = _name_key(body).rstrip(".!")
    lookup = {_name_key(c): c for c in candidates}
    if key in lookup:
        return AssistantReply("intent", lookup[key], intent=lookup[key])
    if key in _OOD_KEYS or "out of domain" in key:
        return AssistantReply("out_of_domain", OOD_TARGET)
    if "?" in body:
        return AssistantReply("clarify", " ".join(body.split()))
    mentioned = [c for k, c in lookup.items() if re.search(rf"\b{re.escape(k)}\b", key)]
    if len(mentioned) == 1:
        return AssistantReply("intent", mentioned[0], intent=mentioned[0])
    return AssistantReply("invalid", text, error="neither an intent from the list, a clarifying question, nor "
                                                 "out of domain")


def render_reply(reply: AssistantReply, structured: bool) -> str:
    """How an assistant turn appears in a conversation history (JSON in structured mode, else plain text)."""
    if not structured:
        return reply.text
    action = {"intent": "predict_intent", "clarify": "ask_clarifying_question",
              "out_of_domain": "out_of_domain"}.get(reply.action, "invalid")
    return json.dumps({"action": action, "intent": reply.intent or "none",
                       "question": reply.text if reply.action == "clarify" else ""})


def assistant_schema(candidates: list[str]) -> dict:
    return {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["predict_intent", "ask_clarifying_question", "out_of_domain"]},
            "intent": {"type": "string", "enum": [*candidates, "none"]},
            "question": {"type": "string", "maxLength": 120},
        },
        "required": ["action", "intent", "question"],
    }


# --------------------------------------------------------------------------- few-shot demos and the assistant prompt

def load_few_shot(records: list[dict], names: list[str]) -> tuple[list[list[Message]], list[str]]:
    """Demo dialogues ({"messages": [...]}) whose assistant turns are usable; the rest listed with a reason."""
    demos, skipped = [], []
    for r in records:
        msgs = r.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
                for m in msgs):
            skipped.append(f"record {r['_record']}: needs messages [{{role: user|assistant, content}}, ...]")
            continue
        bad = [m["content"] for m in msgs if m["role"] == "assistant"
               and parse_assistant_reply(m["content"], names).action == "invalid"]
        if bad or msgs[0]["role"] != "user" or msgs[-1]["role"] != "assistant":
            skipped.append(f"record {r['_record']}: assistant turn {bad[:1]} is not an intent of the catalogue, "
                           "a question or out of domain" if bad else f"record {r['_record']}: must start with the "
                           "user and end with the assistant")
            continue
        demos.append(msgs)
    return demos, skipped


def render_examples(demos: list[list[Message]], candidates: list[str], structured: bool) -> str:
    """The few-shot block; demos predicting an intent that is not a candidate (label dropout) are left out."""
    blocks = []
    for msgs in demos:
        lines = []
        usable = True
        for m in msgs:
            if m["role"] == "assistant":
                reply = parse_assistant_reply(m["content"], candidates)
                if reply.action == "invalid":
                    usable = False
                    break
                lines.append(f"assistant: {render_reply(reply, structured)}")
            else:
                lines.append(f"user: {m['content']}")
        if usable:
            blocks.append(f"Example {len(blocks) + 1}:\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def assistant_prompt_name(structured: bool) -> str:
    return "intents_assistant_json" if structured else "intents_assistant"


def assistant_messages(catalog: Catalog, candidates: list[str], demos: list[list[Message]],
                       history: list[Message], structured: bool, examples_per_intent: int) -> list[Message]:
    """System prompt (catalogue of the candidate intents + few-shot demos), then the conversation so far."""
    prompt = load_prompt(assistant_prompt_name(structured))
    msgs = prompt.messages(catalogue=catalog.render(candidates, examples_per_intent),
                           examples=render_examples(demos, candidates, structured), query=history[0]["content"])
    return [*msgs, *history[1:]]


# --------------------------------------------------------------------------- conversation simulation (§2.1.2)

@dataclass(frozen=True)
class ConversationSeed:
    conversation_id: str
    kind: str  # ambiguous | unambiguous | ood | ood_dropout
    query_id: str
    first_message: str
    unambiguous_query: str
    true_intent: str  # an intent name, or OOD_TARGET
    candidates: tuple[str, ...]
    split: str
    method: str | None = None
    max_turns: int = 5


@dataclass(frozen=True)
class SimulationSettings:
    assistant_role: str = "assistant"
    user_role: str = "user_simulator"
    structured: bool = True
    assistant_max_tokens: int = 96
    user_temperature: float = 0.7
    seed: int = 0
    examples_per_intent: int = 2


USER_SCHEMA = {"type": "object", "properties": {"reply": {"type": "string", "minLength": 2, "maxLength": 120}},
               "required": ["reply"]}


def transcript(history: list[Message], label_turns: bool = True) -> str:
    """`[user 1] ...` / `[assistant 1] ...` lines (numbered per speaker)."""
    counts: dict[str, int] = defaultdict(int)
    lines = []
    for m in history:
        counts[m["role"]] += 1
        who = f"[{m['role']} {counts[m['role']]}]" if label_turns else f"{m['role']}:"
        lines.append(f"{who} {m['content']}")
    return "\n".join(lines)


def user_request(seed: ConversationSeed, history: list[Message], temperature: float, rng_seed: int) -> ChatRequest:
    """Fig. 5 in our words: answer the last question consistently with the unambiguous query in mind."""
    prompt = load_prompt("intents_user")
    msgs = prompt.messages(ambiguous_query=seed.first_message, unambiguous_query=seed.unambiguous_query,
                           transcript=transcript(history, label_turns=False))
    return ChatRequest.of(msgs, prompt.version, USER_SCHEMA, temperature=temperature, seed=rng_seed, max_tokens=80)


TURN_SCHEMA = {
    "conversation_id": pl.Utf8, "message_index": pl.Int64, "speaker": pl.Utf8, "text": pl.Utf8, "action": pl.Utf8,
    "predicted_intent": pl.Utf8, "assistant_turn": pl.Int64, "status": pl.Utf8, "error": pl.Utf8,
    "raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
}


def simulate_conversations(seeds: list[ConversationSeed], chat: Chat, catalog: Catalog, demos: list[list[Message]],
                           settings: SimulationSettings) -> pl.DataFrame:
    """Run every conversation turn by turn; each turn is ONE batched call for all conversations still open.

    The assistant predicts an intent, says out of domain, or asks; a question is answered by the user simulator
    unless the conversation used its max_turns. One row per message (the opening user message included) with the
    conversation's seed fields and its outcome: correct / wrong_intent (a prediction), max_turns (still asking at
    the limit), invalid_reply (unusable assistant reply), llm_error, user_error (the simulator failed).
    """
    s = settings
    history = {x.conversation_id: [{"role": "user", "content": x.first_message}] for x in seeds}
    rows: dict[str, list[dict]] = {x.conversation_id: [{
        "conversation_id": x.conversation_id, "message_index": 0, "speaker": "user", "text": x.first_message,
        "action": "opening", "predicted_intent": None, "assistant_turn": None, "status": "ok", "error": None,
        "raw_output": None, "model": None, "prompt_version": None}] for x in seeds}
    outcome: dict[str, str] = {}
    final: dict[str, str | None] = {}
    calls: dict[str, int] = defaultdict(int)
    version = load_prompt(assistant_prompt_name(s.structured)).version
    active = list(seeds)
    turn = 1
    while active:
        reqs = []
        for x in active:
            msgs = assistant_messages(catalog, list(x.candidates), demos, history[x.conversation_id], s.structured,
                                      s.examples_per_intent)
            reqs.append(ChatRequest.of(msgs, version, assistant_schema(list(x.candidates)) if s.structured else None,
                                       max_tokens=s.assistant_max_tokens))
        results = chat(s.assistant_role, reqs)
        asking = []
        for x, res in zip(active, results, strict=True):
            cid = x.conversation_id
            calls[cid] += 1
            row = {"conversation_id": cid, "message_index": len(rows[cid]), "speaker": "assistant", "text": None,
                   "action": "invalid", "predicted_intent": None, "assistant_turn": turn, "status": "ok",
                   "error": None, "raw_output": res.text, "model": res.model, "prompt_version": version}
            if res.error:
                row.update(status="llm_error", error=res.error)
                outcome[cid] = "llm_error"
            else:
                reply = parse_assistant_reply(res.text, list(x.candidates))
                row.update(text=reply.text, action=reply.action, error=reply.error,
                           predicted_intent=reply.intent if reply.action == "intent" else
                           (OOD_TARGET if reply.action == "out_of_domain" else None))
                if reply.action == "invalid":
                    row["status"] = "parse_error"
                    outcome[cid] = "invalid_reply"
                elif reply.action in ("intent", "out_of_domain"):
                    final[cid] = row["predicted_intent"]
                    outcome[cid] = "correct" if row["predicted_intent"] == x.true_intent else "wrong_intent"
                elif turn >= x.max_turns:
                    outcome[cid] = "max_turns"
                else:
                    history[cid].append({"role": "assistant", "content": render_reply(reply, s.structured)})
                    asking.append(x)
            rows[cid].append(row)
        if not asking:
            break
        # the user simulator sees the assistant's plain text (its question), not the JSON envelope
        ureqs = [user_request(x, [{"role": r["speaker"], "content": r["text"]} for r in rows[x.conversation_id]
                                  if r["text"] is not None], s.user_temperature, s.seed + turn) for x in asking]
        uresults = chat(s.user_role, ureqs)
        active = []
        for x, req, res in zip(asking, ureqs, uresults, strict=True):
            cid = x.conversation_id
            calls[cid] += 1
            row = {"conversation_id": cid, "message_index": len(rows[cid]), "speaker": "user", "text": None,
                   "action": "reply", "predicted_intent": None, "assistant_turn": None, "status": "ok", "error": None,
                   "raw_output": res.text, "model": res.model, "prompt_version": req.prompt_version}
            if res.error:
                row.update(status="llm_error", error=res.error)
            else:
                obj, err = parse_json_object(res.text)
                err = err or require_fields(obj, {"reply": str})
                if err:
                    row.update(status="parse_error", error=err)
                else:
                    row["text"] = " ".join(obj["reply"].split())
            rows[cid].append(row)
            if row["status"] != "ok":
                outcome[cid] = "user_error"
                continue
            history[cid].append({"role": "user", "content": row["text"]})
            active.append(x)
        turn += 1
    frames = []
    for x in seeds:
        cid = x.conversation_id
        t = pl.DataFrame(rows[cid], schema=TURN_SCHEMA)
        n_asst = int((t["speaker"] == "assistant").sum())
        frames.append(t.with_columns(
            kind=pl.lit(x.kind), query_id=pl.lit(x.query_id), split=pl.lit(x.split),
            method=pl.lit(x.method, pl.Utf8), true_intent=pl.lit(x.true_intent),
            ambiguous_query=pl.lit(x.first_message), unambiguous_query=pl.lit(x.unambiguous_query),
            candidate_intents=pl.lit(list(x.candidates), pl.List(pl.Utf8)), max_turns=pl.lit(x.max_turns),
            outcome=pl.lit(outcome[cid]), final_prediction=pl.lit(final.get(cid), pl.Utf8),
            n_assistant_turns=pl.lit(n_asst), llm_calls=pl.lit(calls[cid])))
    if not frames:
        return empty_turns()
    return pl.concat(frames, how="vertical_relaxed")


def empty_turns() -> pl.DataFrame:
    schema = {**TURN_SCHEMA, "kind": pl.Utf8, "query_id": pl.Utf8, "split": pl.Utf8, "method": pl.Utf8,
              "true_intent": pl.Utf8, "ambiguous_query": pl.Utf8, "unambiguous_query": pl.Utf8,
              "candidate_intents": pl.List(pl.Utf8), "max_turns": pl.Int32, "outcome": pl.Utf8,
              "final_prediction": pl.Utf8, "n_assistant_turns": pl.Int32, "llm_calls": pl.Int32}
    return pl.DataFrame(schema=schema)


# --------------------------------------------------------------------------- seeds for training and test conversations

def ambiguous_seeds(queries: pl.DataFrame, candidates: list[str], max_turns: int, prefix: str) -> list[ConversationSeed]:
    return [ConversationSeed(f"{prefix}amb-{r['query_id']}", "ambiguous", r["query_id"], r["ambiguous_query"],
                             r["unambiguous_query"], r["true_intent"], tuple(candidates), r["split"], r["method"],
                             max_turns) for r in queries.iter_rows(named=True)]


def unambiguous_seeds(utts: pl.DataFrame, candidates: list[str], max_turns: int, prefix: str,
                      kind: str = "unambiguous") -> list[ConversationSeed]:
    """Tagged utterances as conversations. kind "ood": a user-provided OOD utterance, target out of domain;
    kind "ood_dropout": label dropout, the true intent removed from the candidates and the target out of domain."""
    out = []
    for r in utts.iter_rows(named=True):
        cands, target = list(candidates), r["intent"]
        if kind == "ood":
            target = OOD_TARGET
        elif kind == "ood_dropout":
            cands, target = [c for c in candidates if c != r["intent"]], OOD_TARGET
        tag = {"unambiguous": "una", "ood": "ood", "ood_dropout": "drop"}[kind]
        out.append(ConversationSeed(f"{prefix}{tag}-{r['utterance_id']}", kind, r["utterance_id"], r["text"],
                                    r["text"], target, tuple(cands), r["split"], None, max_turns))
    return out


# --------------------------------------------------------------------------- scoring (§2.3, Appendices D and E)

def info_schema(n: int) -> dict:
    return {"type": "object", "properties": {"judgments": {
        "type": "array", "minItems": n, "maxItems": n, "items": {"type": "string", "enum": ["enough", "not enough"]}}},
        "required": ["judgments"]}


_QUALITY_KEYS = {"relevance": "relevance", "conciseness": "conciseness", "repetition": "repetition_avoidance",
                 "factuality": "factuality", "politeness": "politeness"}


def quality_schema(n: int) -> dict:
    item = {"type": "object", "properties": {
        key: {"type": "string", "enum": list(QUALITY_SCALES[name])} for key, name in _QUALITY_KEYS.items()},
        "required": list(_QUALITY_KEYS)}
    return {"type": "object", "properties": {"ratings": {"type": "array", "minItems": n, "maxItems": n,
                                                         "items": item}}, "required": ["ratings"]}


def parse_info_judgments(raw: str | None, n: int) -> tuple[list[bool] | None, str | None]:
    """Exactly n labels, each "enough" / "not enough" (longer phrasings accepted), else (None, reason)."""
    obj, err = parse_json_object(raw)
    if err:
        return None, err
    items = obj.get("judgments")
    if not isinstance(items, list):
        return None, "missing list 'judgments'"
    if len(items) != n:
        return None, f"expected {n} judgments, got {len(items)}"
    out = []
    for item in items:
        key = _name_key(str(item))
        if key.startswith("not enough"):
            out.append(False)
        elif key.startswith("enough"):
            out.append(True)
        else:
            return None, f"judgment {item!r} is neither 'enough' nor 'not enough'"
    return out, None


def parse_quality_ratings(raw: str | None, n: int) -> tuple[list[dict[str, float]] | None, str | None]:
    """Exactly n objects with the five Appendix E labels, mapped to their values; else (None, reason)."""
    obj, err = parse_json_object(raw)
    if err:
        return None, err
    items = obj.get("ratings")
    if not isinstance(items, list):
        return None, "missing list 'ratings'"
    if len(items) != n:
        return None, f"expected {n} ratings, got {len(items)}"
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None, "a rating is not an object"
        vals = {}
        for key, name in _QUALITY_KEYS.items():
            label = " ".join(str(item.get(key, item.get(name, ""))).casefold().replace("_", " ").split())
            if label not in QUALITY_SCALES[name]:
                return None, f"{key}: {label!r} is not one of {list(QUALITY_SCALES[name])}"
            vals[name] = QUALITY_SCALES[name][label]
        out.append(vals)
    return out, None


SCORE_SCHEMA = {
    "conversation_id": pl.Utf8, "assistant_turn": pl.Int64, "kind": pl.Utf8, "split": pl.Utf8, "method": pl.Utf8,
    "query_id": pl.Utf8, "true_intent": pl.Utf8, "action": pl.Utf8, "predicted_intent": pl.Utf8, "text": pl.Utf8,
    "enough_info": pl.Boolean, "info_source": pl.Utf8, "ars": pl.Int64, "relevance": pl.Float64,
    "conciseness": pl.Float64, "repetition_avoidance": pl.Float64, "factuality": pl.Float64,
    "politeness": pl.Float64, "quality": pl.Float64, "outcome": pl.Utf8, "n_turns": pl.Int64, "A": pl.Float64,
    "R": pl.Float64, "sdrs": pl.Float64, "score_status": pl.Utf8, "score_error": pl.Utf8, "judge_calls": pl.Int64,
    "info_raw_output": pl.Utf8, "quality_raw_output": pl.Utf8, "model": pl.Utf8, "prompt_version": pl.Utf8,
}


def score_conversations(turns: pl.DataFrame, chat: Chat, catalog: Catalog, alpha: float,
                        judge_unambiguous: bool = False, judge_role: str = "judge") -> pl.DataFrame:
    """One row per assistant turn: ARS (Appendix D), the five ratings for clarifying turns (Appendix E), and the
    conversation's A, R and SDRS (§2.3) repeated on each of its turns.

    The judge decides, per user message, whether the user's messages so far are enough to tell the intent, given
    the unambiguous query the user had in mind (one call per conversation, Fig. 6), and rates every clarifying
    turn (one call per conversation with at least one, Fig. 7). Unambiguous single-intent utterances carry enough
    information by construction unless judge_unambiguous. Conversations that failed for reasons outside the
    assistant (llm_error, user_error) are listed with score_status not_scored and no scores.
    """
    if turns.is_empty():
        return pl.DataFrame(schema=SCORE_SCHEMA)
    info_p, qual_p = load_prompt("intents_judge_info"), load_prompt("intents_judge_quality")
    convs = []
    for (cid,), t in turns.sort("message_index").group_by(["conversation_id"], maintain_order=True):
        meta = t.row(0, named=True)
        history = [{"role": r["speaker"], "content": r["text"] or ""} for r in t.iter_rows(named=True)
                   if r["text"] is not None]
        asst = t.filter(pl.col("speaker") == "assistant").sort("assistant_turn")
        convs.append({"cid": cid, "meta": meta, "history": history, "asst": asst})
    info_jobs, qual_jobs = [], []
    intent_list = catalog.render(examples_per_intent=0)
    for c in convs:
        if c["meta"]["outcome"] not in SCORED_OUTCOMES:
            continue
        n = c["asst"].height
        if c["meta"]["kind"] == "ambiguous" or judge_unambiguous:
            users = [m for m in c["history"] if m["role"] == "user"][:n]
            hist = [m for m in c["history"]]
            info_jobs.append((c, ChatRequest.of(
                info_p.messages(intent_list=intent_list, unambiguous_query=c["meta"]["unambiguous_query"],
                                transcript=transcript(hist), n=len(users)),
                info_p.version, info_schema(len(users)), temperature=0.0, max_tokens=40 + 8 * len(users))))
        clar = [r["assistant_turn"] for r in c["asst"].iter_rows(named=True) if r["action"] == "clarify"]
        if clar:
            qual_jobs.append((c, clar, ChatRequest.of(
                qual_p.messages(intent_list=intent_list, transcript=transcript(c["history"]),
                                turn_list=", ".join(f"[assistant {k}]" for k in clar), n=len(clar)),
                qual_p.version, quality_schema(len(clar)), temperature=0.0, max_tokens=60 + 90 * len(clar))))
    info_res = chat(judge_role, [r for _, r in info_jobs]) if info_jobs else []
    qual_res = chat(judge_role, [r for _, _, r in qual_jobs]) if qual_jobs else []
    info_by = {c["cid"]: (req, res) for (c, req), res in zip(info_jobs, info_res, strict=True)}
    qual_by = {c["cid"]: (clar, req, res) for (c, clar, req), res in zip(qual_jobs, qual_res, strict=True)}
    rows = []
    for c in convs:
        meta, asst, cid = c["meta"], c["asst"], c["cid"]
        n = asst.height
        status, error, models, versions = "ok", None, [], []
        enough: list[bool | None] = [None] * n
        source = None
        if meta["outcome"] not in SCORED_OUTCOMES:
            status, error = "not_scored", f"conversation outcome {meta['outcome']}"
        elif cid in info_by:
            req, res = info_by[cid]
            models.append(res.model)
            versions.append(req.prompt_version)
            source = "judge"
            if res.error:
                status, error = "judge_llm_error", res.error
            else:
                got, err = parse_info_judgments(res.text, n)
                if err:
                    status, error = "judge_parse_error", f"enough-information judgments: {err}"
                else:
                    enough = list(got)
        else:
            enough, source = [True] * n, "by_construction"
        ratings: dict[int, dict[str, float]] = {}
        if cid in qual_by:
            clar, req, res = qual_by[cid]
            models.append(res.model)
            versions.append(req.prompt_version)
            if res.error:
                if status == "ok":
                    status, error = "judge_llm_error", res.error
            else:
                got, err = parse_quality_ratings(res.text, len(clar))
                if err and status == "ok":
                    status, error = "judge_parse_error", f"quality ratings: {err}"
                if got:
                    ratings = dict(zip(clar, got))
        ars = [None if e is None else ambiguity_resolution_score(a, e)
               for a, e in zip(asst["action"].to_list(), enough)]
        qual = {k: turn_quality(v) for k, v in ratings.items()}
        conv = {"A": None, "R": None, "SDRS": None}
        if status != "not_scored":
            correct = meta["outcome"] == "correct"
            non_final = [qual.get(k) for k in asst["assistant_turn"].to_list()[:-1]]
            conv = sdrs(ars, non_final if n > 1 else None, correct, meta["outcome"] == "max_turns", alpha)
        for i, r in enumerate(asst.iter_rows(named=True)):
            v = ratings.get(r["assistant_turn"], {})
            rows.append({
                "conversation_id": cid, "assistant_turn": r["assistant_turn"], "kind": meta["kind"],
                "split": meta["split"], "method": meta["method"], "query_id": meta["query_id"],
                "true_intent": meta["true_intent"], "action": r["action"], "predicted_intent": r["predicted_intent"],
                "text": r["text"], "enough_info": enough[i], "info_source": source if enough[i] is not None else None,
                "ars": ars[i], **{k: v.get(k) for k in QUALITY_SCALES}, "quality": qual.get(r["assistant_turn"]),
                "outcome": meta["outcome"], "n_turns": n, "A": conv["A"], "R": conv["R"], "sdrs": conv["SDRS"],
                "score_status": status, "score_error": error, "judge_calls": len(models),
                "info_raw_output": info_by[cid][1].text if cid in info_by else None,
                "quality_raw_output": qual_by[cid][2].text if cid in qual_by else None,
                "model": ",".join(sorted(set(models))) or None, "prompt_version": ",".join(versions) or None,
            })
    return pl.DataFrame(rows, schema=SCORE_SCHEMA)


def conversation_table(scores: pl.DataFrame) -> pl.DataFrame:
    """One row per conversation: id, kind, outcome, turns, A, R, SDRS, score_status (from the per-turn scores)."""
    keep = ["conversation_id", "kind", "split", "method", "query_id", "true_intent", "outcome", "n_turns", "A", "R",
            "sdrs", "score_status"]
    return scores.group_by("conversation_id", maintain_order=True).agg(
        [pl.col(c).first() for c in keep[1:]]).select(keep)


# --------------------------------------------------------------------------- curation (Appendix A) and label dropout

def keep_count(n: int, percentile: float) -> int:
    """How many of n conversations the top `percentile` % keeps: ceil(n * p / 100)."""
    return min(n, math.ceil(n * percentile / 100 - 1e-9))


def top_percentile_cut(conv: pl.DataFrame, keep_percentile: float, require_correct: bool = True) -> pl.DataFrame:
    """Rank conversations by SDRS (high first) and keep the top `keep_percentile` %: exactly ceil(n * p / 100) of
    the n scored ones. Ties at the cut are broken by conversation_id (ascending), so the count is exact and the
    result reproducible; a tied conversation left out says so in removed_reason. A kept-rank conversation that
    never reached a final prediction (max_turns, invalid_reply) is removed whatever require_correct says: Appendix C
    training examples end with the predicted intent. With require_correct, a kept-rank conversation whose final
    intent was not the true one is removed too. Unscored conversations (no SDRS) are removed with their score
    status. Adds sdrs_rank, cut_sdrs, kept, removed_reason."""
    scored = conv.filter(pl.col("sdrs").is_not_null()).sort(["sdrs", "conversation_id"], descending=[True, False])
    k = keep_count(scored.height, keep_percentile)
    cut = scored["sdrs"][k - 1] if k > 0 else None
    scored = scored.with_columns(sdrs_rank=pl.int_range(1, scored.height + 1, dtype=pl.Int64))
    rows = []
    for r in scored.iter_rows(named=True):
        kept, reason = True, None
        if r["sdrs_rank"] > k:
            kept = False
            reason = (f"tied at the cut SDRS {cut:.3f}; ties broken by conversation_id" if cut is not None
                      and r["sdrs"] == cut else f"below the top {keep_percentile:g}% by SDRS (cut {cut:.3f})"
                      if cut is not None else f"top {keep_percentile:g}% of {scored.height} keeps none")
        elif r["outcome"] not in PREDICTION_OUTCOMES:
            kept, reason = False, f"no final prediction (outcome {r['outcome']})"
        elif require_correct and r["outcome"] != "correct":
            kept, reason = False, f"final outcome {r['outcome']} (require_correct)"
        rows.append({"conversation_id": r["conversation_id"], "sdrs_rank": r["sdrs_rank"], "kept": kept,
                     "removed_reason": reason})
    ranked = pl.DataFrame(rows, schema={"conversation_id": pl.Utf8, "sdrs_rank": pl.Int64, "kept": pl.Boolean,
                                        "removed_reason": pl.Utf8})
    out = conv.join(ranked, on="conversation_id", how="left")
    return out.with_columns(
        kept=pl.col("kept").fill_null(False),
        removed_reason=pl.when(pl.col("sdrs").is_null()).then(pl.format("no SDRS ({})", pl.col("score_status")))
        .otherwise(pl.col("removed_reason")),
        cut_sdrs=pl.lit(cut, pl.Float64), keep_percentile=pl.lit(float(keep_percentile)))


def keep_percentile_sweep(conv: pl.DataFrame, percentiles: list[float]) -> pl.DataFrame:
    """Table 4 layout on the generated data: for each percentile, how many scored conversations the cut keeps,
    their mean SDRS and the SDRS at the cut. (The paper reports the SDRS of a model fine-tuned on each subset;
    this pipeline does not fine-tune, so it reports the kept set itself.)"""
    s = conv.filter(pl.col("sdrs").is_not_null()).sort(["sdrs", "conversation_id"], descending=[True, False])
    rows = []
    for p in percentiles:
        k = keep_count(s.height, p)
        top = s.head(k)["sdrs"]
        rows.append({"percentile": float(p), "n_scored": s.height, "n_kept": k,
                     "mean_sdrs_kept": float(top.mean()) if k else None,
                     "cut_sdrs": float(top[-1]) if k else None,
                     "n_correct_kept": int((s.head(k)["outcome"] == "correct").sum())})
    return pl.DataFrame(rows, schema={"percentile": pl.Float64, "n_scored": pl.Int64, "n_kept": pl.Int64,
                                      "mean_sdrs_kept": pl.Float64, "cut_sdrs": pl.Float64,
                                      "n_correct_kept": pl.Int64})


def label_dropout_mask(n: int, fraction: float, seed: int) -> list[bool]:
    """Which of n unambiguous examples get label dropout: round(fraction * n) (halves up), chosen with a seed."""
    k = min(n, math.floor(fraction * n + 0.5))
    chosen = set(np.random.default_rng(seed).choice(n, size=k, replace=False).tolist()) if k else set()
    return [i in chosen for i in range(n)]


def training_system_prompt(catalog: Catalog, candidates: list[str], demos: list[list[Message]],
                           examples_per_intent: int) -> str:
    """The plain-text assistant prompt (the paper's output protocol) with the given candidate intents."""
    return assistant_messages(catalog, candidates, demos, [{"role": "user", "content": ""}], False,
                              examples_per_intent)[0]["content"]


def training_conversations(turns: pl.DataFrame, conv: pl.DataFrame, catalog: Catalog, demos: list[list[Message]],
                           keep_percentile: float, require_correct: bool, ood_fraction: float, seed: int,
                           examples_per_intent: int) -> pl.DataFrame:
    """One row per simulated conversation with `kept`, `removed_reason` and TRL `messages` (Appendix C).

    Label dropout (§2.2.1) first: a seeded ood_fraction of the unambiguous conversations is rewritten as an
    out-of-domain example (the true intent removed from the candidate list in the system prompt, target
    "out of domain"); such a row is kept whatever its SDRS, which scored the original target. The SDRS cut then
    ranks the remaining conversations.
    """
    una = conv.filter(pl.col("kind") == "unambiguous").sort("conversation_id")["conversation_id"].to_list()
    dropped = {cid for cid, m in zip(una, label_dropout_mask(len(una), ood_fraction, seed)) if m}
    ranked = top_percentile_cut(conv.filter(~pl.col("conversation_id").is_in(list(dropped))), keep_percentile,
                                require_correct)
    by_conv = {cid: t.sort("message_index") for (cid,), t in turns.group_by(["conversation_id"])}
    names = catalog.names
    rows = []
    for r in pl.concat([ranked, conv.filter(pl.col("conversation_id").is_in(list(dropped)))],
                       how="diagonal_relaxed").iter_rows(named=True):
        cid = r["conversation_id"]
        t = by_conv[cid]
        is_drop = cid in dropped
        cands = [c for c in names if c != r["true_intent"]] if is_drop else t["candidate_intents"][0].to_list()
        system = training_system_prompt(catalog, cands, demos, examples_per_intent)
        if is_drop:
            msgs = [{"role": "user", "content": t["text"][0]}, {"role": "assistant", "content": OOD_TARGET}]
        else:
            msgs = [{"role": m["speaker"], "content": m["text"]} for m in t.iter_rows(named=True)
                    if m["text"] is not None and m["status"] == "ok"]
        messages = [{"role": "system", "content": system}, *msgs]
        rows.append({
            "conversation_id": cid, "kind": r["kind"], "method": r["method"], "split": r["split"],
            "query_id": r["query_id"], "true_intent": r["true_intent"],
            "target": OOD_TARGET if is_drop else r["true_intent"], "candidate_intents": cands,
            "label_dropout": is_drop, "outcome": r["outcome"], "n_turns": r["n_turns"], "sdrs": r["sdrs"],
            "sdrs_rank": r.get("sdrs_rank"), "cut_sdrs": r.get("cut_sdrs"),
            "kept": True if is_drop else bool(r["kept"]),
            "removed_reason": None if is_drop else r["removed_reason"],
            "messages": messages, "n_messages": len(messages),
        })
    schema = {"conversation_id": pl.Utf8, "kind": pl.Utf8, "method": pl.Utf8, "split": pl.Utf8, "query_id": pl.Utf8,
              "true_intent": pl.Utf8, "target": pl.Utf8, "candidate_intents": pl.List(pl.Utf8),
              "label_dropout": pl.Boolean, "outcome": pl.Utf8, "n_turns": pl.Int64, "sdrs": pl.Float64,
              "sdrs_rank": pl.Int64, "cut_sdrs": pl.Float64, "kept": pl.Boolean, "removed_reason": pl.Utf8,
              "messages": MESSAGE_TYPE, "n_messages": pl.Int64}
    return pl.DataFrame(rows, schema=schema).sort("conversation_id")


def trl_jsonl(rows: pl.DataFrame) -> str:
    """Kept rows as TRL conversational JSONL: one {"messages": [...]} object per line."""
    return "".join(json.dumps({"messages": m}, ensure_ascii=False) + "\n"
                   for m in rows.filter(pl.col("kept"))["messages"].to_list())


# --------------------------------------------------------------------------- evaluation table (Table 2 layout + OOD)

def intent_eval_table(turns: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """Per subject: IC accuracy on unambiguous queries, mean SDRS (per conversation), mean ARS and the five quality
    means (per assistant turn), the accuracy on ambiguous queries, OOD accuracy (user-provided OOD utterances and
    label dropout on test utterances: the final prediction within the turn limit is "out of domain"; the subject may
    ask first, and mean_turns_ood says how often it did), and counts. Conversations that failed outside the assistant (llm_error,
    user_error) are excluded from every share and counted in `excluded`."""
    conv = turns.group_by(["subject", "conversation_id"]).agg(
        pl.col("kind").first(), pl.col("outcome").first(), pl.col("n_assistant_turns").first(),
        pl.col("llm_calls").first())
    valid = pl.col("outcome").is_in(list(SCORED_OUTCOMES))
    correct = (pl.col("outcome") == "correct").cast(pl.Float64)

    def acc(kind: str, name: str) -> list[pl.Expr]:
        sel = (pl.col("kind") == kind) & valid
        return [correct.filter(sel).mean().alias(name), sel.sum().alias(f"n_{kind}")]

    a = conv.group_by("subject").agg(
        *acc("unambiguous", "ic_accuracy"), *acc("ambiguous", "ambiguous_accuracy"), *acc("ood", "ood_accuracy"),
        *acc("ood_dropout", "ood_dropout_accuracy"),
        pl.col("n_assistant_turns").filter((pl.col("kind") == "ambiguous") & valid).mean().alias("mean_turns_ambiguous"),
        pl.col("n_assistant_turns").filter(pl.col("kind").is_in(["ood", "ood_dropout"]) & valid).mean()
        .alias("mean_turns_ood"),
        (~valid).sum().alias("excluded"), pl.col("llm_calls").sum().alias("assistant_user_calls"))
    sc = scores.filter(pl.col("kind").is_in(["ambiguous", "unambiguous"]))
    b = sc.group_by("subject").agg(
        pl.col("sdrs").filter(pl.col("assistant_turn") == 1).mean().alias("sdrs"),
        pl.col("ars").mean().alias("ars"),
        pl.col("relevance").mean().alias("rel"), pl.col("conciseness").mean().alias("con"),
        pl.col("repetition_avoidance").mean().alias("ra"), pl.col("factuality").mean().alias("fac"),
        pl.col("politeness").mean().alias("pol"),
        pl.col("conversation_id").filter(pl.col("sdrs").is_not_null()).n_unique().alias("n_scored"),
        pl.col("relevance").is_not_null().sum().alias("n_rated_turns"))
    out = a.join(b, on="subject", how="left")
    cols = ["subject", "ic_accuracy", "sdrs", "ars", "rel", "con", "ra", "fac", "pol", "ood_accuracy",
            "ood_dropout_accuracy", "ambiguous_accuracy", "mean_turns_ambiguous", "mean_turns_ood", "n_unambiguous", "n_ambiguous",
            "n_ood", "n_ood_dropout", "n_scored", "n_rated_turns", "excluded", "assistant_user_calls"]
    return out.select(cols).sort("subject")


_PERCENT = {"ic_accuracy", "ood_accuracy", "ood_dropout_accuracy", "ambiguous_accuracy"}


def markdown(df: pl.DataFrame) -> str:
    """A Markdown table: accuracies in %, other floats (SDRS, ARS, ratings, turns) with two decimals."""
    if df.is_empty():
        return "_(no rows)_\n"
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    for row in df.iter_rows(named=True):
        cells = []
        for c, v in row.items():
            if v is None:
                cells.append("-")
            elif isinstance(v, float):
                cells.append(f"{v * 100:.1f}" if c in _PERCENT else f"{v:.2f}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- call accounting

@dataclass
class CallLog:
    """Wraps a chat callable; keeps every result per role for usage metadata. Empty batches make no call."""

    chat: Chat
    results: dict[str, list[ChatResult]] = field(default_factory=lambda: defaultdict(list))

    def __call__(self, role: str, requests: list[ChatRequest]) -> list[ChatResult]:
        if not requests:
            return []
        out = self.chat(role, requests)
        self.results[role].extend(out)
        return out
