"""ClarifyMT-Bench §4.2 manual validation as a round trip: export a review sheet, read it back filled in.

The sheet holds a seeded sample of the kept query / clarifying-question pairs with the judge's rating and
empty columns for two annotators (keep_1, keep_2: keep or remove; rating_1, rating_2: 1-5, optional).
A filled sheet decides its rows (the removals), gives Cohen's kappa between the annotators and Pearson r
between the judge's rating and the annotators' mean rating. Rows no sheet decides go through the automatic
validity filter: a judge rating under a threshold and (optionally) an LLM subtype check. A query that echoes
the prompt's frame ("A user asked: ...") is removed on either path.

The demo ships a filled example sheet whose labels the project wrote itself: it exercises the round trip but
is no annotation study. When the sheet given is that file (same path or same bytes), the summary says so
(path `illustrative_sheet`, `labels` ILLUSTRATIVE); only a user's own sheet is reported as human agreement.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from scipy import stats

from dagster_project.config.clarifymt import ValidationConfig
from dagster_project.core.shared.metrics import cohen_kappa
from dagster_project.core.shared.taxonomy import SUBTYPE_BY_KEY, SUBTYPES
from dagster_project.io.records import Quarantine, read_records
from dagster_project.llm.task import Chat, LLMTask, Reply, Status

SHIPPED_EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "benchmark" / "review_sheet_example.csv"
ILLUSTRATIVE = "illustrative labels written by the project, not an annotation study"
SHEET_COLUMNS = ["item_id", "query_id", "subtype", "source", "query", "clarifying_question", "judge_rating",
                 "keep_1", "keep_2", "rating_1", "rating_2", "note"]
ANNOTATOR_COLUMNS = {"keep_1": pl.Boolean, "keep_2": pl.Boolean, "rating_1": pl.Float64, "rating_2": pl.Float64}
# A query that starts like a prompt's frame ("A user asked: ...", "Query: ...") is the template echoed back.
ECHO = re.compile(r"^\W*(a\s+user\s+(asked|asks|wrote|writes|says|said)|(ambiguous\s+)?(user\s+)?"
                  r"(request|query|question)|user|here\s+is|example|json)\s*:", re.IGNORECASE)
def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


# The generation prompt shows each subtype's definition and example request: a query that is the example,
# or contains the definition, was copied from the prompt.
PROMPT_EXAMPLES = frozenset(_normal(s.example) for s in SUBTYPES)
PROMPT_DEFINITIONS = tuple(_normal(s.definition) for s in SUBTYPES)
YES = {"1", "keep", "yes", "y", "true", "k"}
NO = {"0", "remove", "no", "n", "false", "r", "drop"}


def item_id(query: str) -> str:
    """Stable id of a query for the sheet: sha1 of its whitespace- and case-normalised text (12 hex)."""
    return hashlib.sha1(" ".join(query.lower().split()).encode()).hexdigest()[:12]


def review_sheet(rows: pl.DataFrame, fraction: float, seed: int) -> pl.DataFrame:
    """A seeded sample (at least one row) of the kept, usable rows with empty annotator columns."""
    pool = rows.filter(pl.col("kept") & (pl.col("status") == Status.OK.value)).sort("query_id")
    n = min(pool.height, max(1, round(fraction * pool.height))) if pool.height else 0
    picked = sorted(random.Random(seed).sample(range(pool.height), n))
    sample = pool[picked] if picked else pool.clear()
    return sample.select(
        pl.col("query").map_elements(item_id, return_dtype=pl.Utf8).alias("item_id"), "query_id", "subtype",
        "source", "query", "clarifying_question", pl.col("quality").alias("judge_rating"),
        *[pl.lit(None, dtype=pl.Utf8).alias(c) for c in ("keep_1", "keep_2", "rating_1", "rating_2", "note")],
    ).select(SHEET_COLUMNS)


def is_echo(query: str | None) -> bool:
    """The generator echoed the prompt (its frame, or the definition / example request it shows) instead of
    writing a request."""
    if not query:
        return False
    text = _normal(query)
    return bool(ECHO.match(query)) or text in PROMPT_EXAMPLES or any(d in text for d in PROMPT_DEFINITIONS)


def _keep(value: Any) -> bool | None | str:
    text = "" if value is None else str(value).strip().lower()
    if not text:
        return None
    return True if text in YES else False if text in NO else f"keep value {value!r} is not keep/remove"


def _rating(value: Any) -> float | None | str:
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    try:
        r = float(text)
    except ValueError:
        return f"rating {value!r} is not a number"
    return r if 0 <= r <= 5 else f"rating {value!r} outside 0-5"


@dataclass
class Sheet:
    """A filled sheet as read: one parsed row per usable record, the rest in the quarantine."""

    rows: pl.DataFrame
    rejected: Quarantine = field(default_factory=Quarantine)


def read_sheet(path: str, key: str = "benchmark.annotations_path") -> Sheet:
    """Read a filled sheet (CSV / TSV / JSONL / Parquet ...); a bad label sends its row to the quarantine."""
    records, rejected = read_records(path, key=key)
    rows = []
    for rec in records:
        obj = rec.data if isinstance(rec.data, dict) else {}
        if not str(obj.get("item_id") or "").strip():
            rejected.add_record(rec, "missing item_id", "item_id")
            continue
        parsed = {c: (_keep if c.startswith("keep") else _rating)(obj.get(c)) for c in ANNOTATOR_COLUMNS}
        bad = [(c, v) for c, v in parsed.items() if isinstance(v, str)]
        if bad:
            rejected.add_record(rec, bad[0][1], bad[0][0])
            continue
        judge = _rating(obj.get("judge_rating"))
        rows.append({"item_id": str(obj["item_id"]).strip(), "record": rec.record,
                     "sheet_judge_rating": judge if isinstance(judge, float) else None, **parsed})
    schema = {"item_id": pl.Utf8, "record": pl.Int64, "sheet_judge_rating": pl.Float64, **ANNOTATOR_COLUMNS}
    return Sheet(pl.DataFrame(rows, schema=schema).unique("item_id", keep="first", maintain_order=True), rejected)


def human_decision(keep_1: bool | None, keep_2: bool | None, on_disagreement: str) -> bool | None:
    """Keep (True), remove (False) or undecided (None) from the two annotators' labels."""
    labels = [k for k in (keep_1, keep_2) if k is not None]
    if not labels:
        return None
    if all(labels) or not any(labels):
        return labels[0]
    return on_disagreement == "keep"


def agreement(sheet: pl.DataFrame) -> dict[str, Any]:
    """Cohen's kappa / observed agreement on rows both annotators labelled; Pearson r judge vs mean human rating
    (`judge_rating`: this run's rating of the matched query, else the sheet's column)."""
    both = sheet.filter(pl.col("keep_1").is_not_null() & pl.col("keep_2").is_not_null())
    out: dict[str, Any] = {"double_annotated": both.height, "observed_agreement": None, "kappa": None}
    if both.height:
        k = cohen_kappa([str(x) for x in both["keep_1"]], [str(x) for x in both["keep_2"]])
        out |= {"observed_agreement": k["observed_agreement"], "kappa": None if k["kappa"] != k["kappa"] else k["kappa"]}
    rated = sheet.with_columns(human=pl.mean_horizontal("rating_1", "rating_2")).filter(
        pl.col("human").is_not_null() & pl.col("judge_rating").is_not_null())
    out |= {"rated": rated.height, "pearson_r": None}
    if rated.height >= 2 and rated["human"].n_unique() > 1 and rated["judge_rating"].n_unique() > 1:
        out["pearson_r"] = float(stats.pearsonr(rated["judge_rating"], rated["human"]).statistic)
    return out


class SubtypeFit(Reply):
    """Does the request show the named ambiguity type?"""

    fits: bool


CHECK_SUBTYPE = LLMTask("check_subtype_fit", role="judge", reply=SubtypeFit,
                        sampling={"temperature": 0.0, "max_tokens": 16})


def subtype_fit(chat: Chat, rows: pl.DataFrame) -> pl.DataFrame:
    """One judge call per row: fits (null when the reply was unusable) and the call's status."""
    outcomes = CHECK_SUBTYPE.run(chat, rows.to_dicts(), lambda r: {
        "subtype_name": SUBTYPE_BY_KEY[r["subtype"]].name, "definition": SUBTYPE_BY_KEY[r["subtype"]].definition,
        "query": r["query"]})
    return pl.DataFrame([{"fits": o.value.fits if o.ok else None, "fit_status": o.status.value} for o in outcomes],
                        schema={"fits": pl.Boolean, "fit_status": pl.Utf8})


VALIDATION_COLUMNS = {"validation_path": pl.Utf8, "valid": pl.Boolean, "removed_by": pl.Utf8, "fits": pl.Boolean,
                      "fit_status": pl.Utf8, "item_id": pl.Utf8, **ANNOTATOR_COLUMNS}


def validate(chat: Chat, rows: pl.DataFrame, cfg: ValidationConfig, sheet: Sheet | None,
             ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every row of single_turn_queries with `valid` and why not; and the summary for the agreement table.

    Kept rows the sheet decides take the annotators' decision (path human); every other kept row goes
    through the automatic filter (path automatic); prompt echoes are removed on both paths. Rows dedup or a failed call already removed stay
    invalid with no path. Sheet rows that match no kept query change nothing and are counted."""
    out = rows.with_columns(item_id=pl.col("query").map_elements(item_id, return_dtype=pl.Utf8))
    human = sheet.rows if sheet is not None else pl.DataFrame(schema={"item_id": pl.Utf8, **ANNOTATOR_COLUMNS})
    out = out.join(human.select("item_id", *ANNOTATOR_COLUMNS), on="item_id", how="left")
    decided = [human_decision(a, b, cfg.on_disagreement) for a, b in zip(out["keep_1"], out["keep_2"], strict=True)]
    live = (pl.col("kept") & (pl.col("status") == Status.OK.value)).fill_null(False)
    out = out.with_columns(decision=pl.Series(decided, dtype=pl.Boolean)).with_columns(
        validation_path=pl.when(~live).then(None).when(pl.col("decision").is_not_null()).then(pl.lit("human"))
        .otherwise(pl.lit("automatic")))
    auto = out.with_row_index("_i").filter(pl.col("validation_path") == "automatic")
    fits = [None] * out.height
    fit_status = [None] * out.height
    if cfg.subtype_check and auto.height:
        checkable = auto.filter(~pl.col("query").map_elements(is_echo, return_dtype=pl.Boolean))
        for i, f in zip(checkable["_i"], subtype_fit(chat, checkable).iter_rows(), strict=True):
            fits[i], fit_status[i] = f
    out = out.with_columns(fits=pl.Series(fits, dtype=pl.Boolean), fit_status=pl.Series(fit_status, dtype=pl.Utf8))
    echo = pl.col("query").map_elements(is_echo, return_dtype=pl.Boolean)
    # an echoed prompt is a format defect, not a judgement: removed on either path
    removed = (pl.when(pl.col("validation_path").is_null()).then(None)
               .when(echo).then(pl.lit("prompt_echo"))
               .when(pl.col("validation_path") == "human")
               .then(pl.when(pl.col("decision")).then(None).otherwise(pl.lit("human")))
               .when(pl.col("quality") < cfg.min_quality).then(pl.lit("low_rating"))  # null: unrated
               .when(~pl.col("fits")).then(pl.lit("off_category"))  # null: unchecked
               .otherwise(None))
    out = out.with_columns(removed_by=removed).with_columns(
        valid=pl.col("validation_path").is_not_null() & pl.col("removed_by").is_null()).drop("decision")
    matched = set(out["item_id"].drop_nulls()) & set(human["item_id"])
    summary = {
        "path": "human" if sheet is not None else "automatic",
        "sheet_rows": human.height, "sheet_rows_matched": len(matched),
        "sheet_rows_unmatched": human.height - len(matched),
        "sheet_rows_rejected": len(sheet.rejected) if sheet is not None else 0,
        "validated_rows": int(out["validation_path"].is_not_null().sum()),
        "decided_by_human": int((out["validation_path"] == "human").sum()),
        "decided_automatically": int((out["validation_path"] == "automatic").sum()),
        "valid": int(out["valid"].sum()),
        **{f"removed_{r}": int((out["removed_by"] == r).sum())
           for r in ("human", "prompt_echo", "low_rating", "off_category")},
        **(agreement(human.join(out.filter(live).select("item_id", run_rating=pl.col("quality").cast(pl.Float64))
                                .unique("item_id"), on="item_id", how="left")
                     .with_columns(judge_rating=pl.coalesce("run_rating", "sheet_judge_rating")))
           if sheet is not None else
           {"double_annotated": 0, "observed_agreement": None, "kappa": None, "rated": 0, "pearson_r": None}),
    }
    return out, summary


AGREEMENT_SCHEMA = {"path": pl.Utf8, "sheet": pl.Utf8, "labels": pl.Utf8, "sheet_rows": pl.Int64, "sheet_rows_matched": pl.Int64,
                    "sheet_rows_unmatched": pl.Int64, "sheet_rows_rejected": pl.Int64, "validated_rows": pl.Int64,
                    "decided_by_human": pl.Int64, "decided_automatically": pl.Int64, "valid": pl.Int64,
                    "removed_human": pl.Int64, "removed_prompt_echo": pl.Int64, "removed_low_rating": pl.Int64,
                    "removed_off_category": pl.Int64, "double_annotated": pl.Int64,
                    "observed_agreement": pl.Float64, "kappa": pl.Float64, "rated": pl.Int64,
                    "pearson_r": pl.Float64}


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def is_shipped_example(sheet_path: str | None) -> bool:
    """Whether the sheet is the example shipped in data/ (the same file, or a copy with the same bytes)."""
    if not sheet_path:
        return False
    given = Path(sheet_path).resolve()
    if given == SHIPPED_EXAMPLE or given.as_posix().endswith("data/benchmark/review_sheet_example.csv"):
        return True
    shipped = _sha256(SHIPPED_EXAMPLE)
    return shipped is not None and _sha256(given) == shipped


def agreement_table(summary: dict[str, Any], sheet_path: str | None) -> pl.DataFrame:
    """The one-row table the report reads: which path, who labelled the sheet (`labels`: "annotators", or
    ILLUSTRATIVE for the shipped example, whose path is then `illustrative_sheet`), removals, kappa and r."""
    row = {**summary, "sheet": sheet_path, "labels": None}
    if summary.get("path") == "human":
        illustrative = is_shipped_example(sheet_path)
        row |= {"labels": ILLUSTRATIVE if illustrative else "annotators",
                "path": "illustrative_sheet" if illustrative else "human"}
    return pl.DataFrame([row], schema=AGREEMENT_SCHEMA)
