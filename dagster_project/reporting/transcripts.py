"""The transcript viewer: one self-contained HTML page per evaluated dataset (assets/transcripts/<dataset>.html)
that lists every dialogue and shows, turn by turn, the user's words, the reference and each method's reply.

Reads the built Parquet (evaluation.predictions, evaluation.judge_scores and the dialogue tables), never runs
anything. The page embeds the data once as compact JSON (every string stored once in a table, columns as index
arrays), gzipped, and its small script renders the list and one dialogue at a time, so 16k turns x 9 methods stay
usable (docs/viewer.md has the measured size and paint times).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from dagster_project.core.clarifymt.metrics import scored
from dagster_project.io.writers import atomic_path
from dagster_project.lib.warehouse import ASSETS_DIR, read_asset

TRANSCRIPTS_DIR = "transcripts"  # under the assets folder, beside index.html (outside every DVC out)
AGENT_PREFIX = "clarify_agent"  # ClarifyAgent and its ablations: their module outputs are shown
TURN_KEY = ["dialogue_id", "turn"]
PRED_KEY = ["subject", "method", "dialogue_id", "turn"]
AGENT_FIELDS = ("decided_by", "target_slot", "persona_forecast", "rsc", "slots", "assumptions", "step_errors")
MISSING = -1  # index of a null string / score in the encoded columns
AGENT_CHUNK = 2048  # predictions per separately packed block of module outputs (unpacked when first opened)


class StringTable:
    """Every distinct string once; columns hold indexes into it (MISSING for null)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def encode(self, values: list[Any]) -> list[int]:
        out = []
        for v in values:
            if v is None:
                out.append(MISSING)
                continue
            s = str(v)
            i = self.index.get(s)
            if i is None:
                i = self.index[s] = len(self.index)
            out.append(i)
        return out

    def strings(self) -> list[str]:
        return list(self.index)


def _user_utterances(base: str | Path, dataset: str) -> pl.DataFrame:
    """(dialogue_id, turn, user) for the dataset's turns: the last user message of each turn's messages, read from
    benchmark.persona_dialogues (dataset clarifymt) or evaluation.external_dialogues (the others)."""
    frames = []
    bench = read_asset(base, "benchmark", "persona_dialogues")
    if bench is not None and "dataset" not in bench.columns:
        frames.append(bench.with_columns(dataset=pl.lit("clarifymt")))
    external = read_asset(base, "evaluation", "external_dialogues")
    if external is not None:
        frames.append(external)
    schema = {"dialogue_id": pl.Utf8, "turn": pl.Int64, "user": pl.Utf8}
    out = []
    for f in frames:
        f = f.filter(pl.col("dataset") == dataset)
        if f.is_empty() or "messages" not in f.columns:
            continue
        last_user = (pl.col("messages").list.eval(pl.element().filter(pl.element().struct.field("role") == "user")
                                                  .struct.field("content")).list.last())
        user = pl.coalesce(pl.col("user_utterance"), last_user) if "user_utterance" in f.columns else last_user
        out.append(f.select(pl.col("dialogue_id").cast(pl.Utf8), pl.col("turn").cast(pl.Int64), user.alias("user")))
    return pl.concat(out).unique(TURN_KEY, keep="first") if out else pl.DataFrame(schema=schema)


def _agent_outputs(row: dict[str, Any]) -> str | None:
    """ClarifyAgent's module outputs of one turn as JSON text: the parsed modules of its trace (raw replies only
    for modules that failed to parse) and the Tracker's slot table; None for other methods."""
    if not str(row["method"]).startswith(AGENT_PREFIX):
        return None
    trace = json.loads(row["trace"]) if row.get("trace") else {}
    failed = set(trace.get("step_errors") or {})
    raw = {k: v for k, v in (trace.pop("raw", None) or {}).items() if k in failed}
    fields = {k: row.get(k) for k in AGENT_FIELDS if row.get(k) is not None}
    for k in ("slots", "assumptions"):
        if isinstance(fields.get(k), str):
            fields[k] = json.loads(fields[k])
    out = {**trace, **fields, **({"raw_of_failed_modules": raw} if raw else {})}
    return json.dumps(out, ensure_ascii=False, sort_keys=True, default=str) if out else None


@dataclass
class DatasetTurns:
    """One dataset's predictions joined to judge scores and user utterances, in dialogue, turn, method order."""

    dataset: str
    preds: pl.DataFrame


def dataset_turns(base: str | Path = ASSETS_DIR, clarify_must_be_question: bool = False) -> list[DatasetTurns]:
    """Every evaluated dataset's rows (empty list when evaluation.predictions is not built)."""
    preds = read_asset(base, "evaluation", "predictions")
    if preds is None or preds.is_empty():
        return []
    for col, dtype in {"trace": pl.Utf8, "error": pl.Utf8, "response": pl.Utf8, "reference_question": pl.Utf8,
                       **{c: pl.Utf8 for c in AGENT_FIELDS}}.items():
        if col not in preds.columns:
            preds = preds.with_columns(pl.lit(None, dtype).alias(col))
    preds = scored(preds, clarify_must_be_question).with_columns(
        pl.col("turn").cast(pl.Int64), pl.col("dialogue_id").cast(pl.Utf8))
    judge = read_asset(base, "evaluation", "judge_scores")
    if judge is not None and "score" in judge.columns:
        judge = judge.filter(pl.col("score").is_not_null()).select(
            "dataset", *PRED_KEY, pl.col("score").cast(pl.Int64), pl.col("judged_by").cast(pl.Utf8)
        ).unique(["dataset", *PRED_KEY], keep="first")
        preds = preds.join(judge.with_columns(pl.col("turn").cast(pl.Int64)), on=["dataset", *PRED_KEY], how="left")
    else:
        preds = preds.with_columns(score=pl.lit(None, pl.Int64), judged_by=pl.lit(None, pl.Utf8))
    out = []
    for dataset in sorted(preds["dataset"].unique().to_list()):
        part = preds.filter(pl.col("dataset") == dataset)
        part = part.join(_user_utterances(base, dataset), on=TURN_KEY, how="left")
        out.append(DatasetTurns(dataset, part.sort("dialogue_id", "turn", "subject", "method")))
    return out


def agent_outputs(t: DatasetTurns) -> list[str | None]:
    """ClarifyAgent's module outputs (JSON text) of every prediction, None for the other methods."""
    return [_agent_outputs(r) for r in t.preds.select("method", "trace", *AGENT_FIELDS).iter_rows(named=True)]


def encode(t: DatasetTurns, agent: list[str | None]) -> dict[str, Any]:
    """The page's data: dialogues (d), their turns (t) and every prediction (p) as parallel arrays; d.t0 and t.p0
    are the first turn / prediction of each dialogue / turn (the next entry's value ends the range); p.agent
    flags the predictions with module outputs (`agent`, packed apart by agent_blocks)."""
    strings = StringTable()
    preds = t.preds
    turns = preds.unique(TURN_KEY, keep="first", maintain_order=True)
    dialogues = turns.unique("dialogue_id", keep="first", maintain_order=True)
    turn_start = preds.with_row_index("_i").group_by(TURN_KEY, maintain_order=True).agg(pl.col("_i").min())
    dlg_start = turns.with_row_index("_i").group_by("dialogue_id", maintain_order=True).agg(pl.col("_i").min())
    correct = [MISSING if not ev else int(bool(c)) for ev, c in zip(preds["evaluated"], preds["correct"], strict=True)]
    return {
        "dataset": t.dataset,
        "d": {"id": strings.encode(dialogues["dialogue_id"].to_list()),
              "persona": strings.encode(dialogues["persona"].to_list()),
              "subtype": strings.encode(dialogues["subtype"].to_list()),
              "t0": dlg_start["_i"].to_list()},
        "t": {"turn": turns["turn"].to_list(), "user": strings.encode(turns["user"].to_list()),
              "ref": strings.encode(turns["reference_action"].to_list()),
              "refq": strings.encode(turns["reference_question"].to_list()),
              "p0": turn_start["_i"].to_list()},
        "p": {"subject": strings.encode(preds["subject"].to_list()), "method": strings.encode(preds["method"].to_list()),
              "action": strings.encode(preds["action"].to_list()), "ok": correct,
              "reply": strings.encode(preds["response"].to_list()), "status": strings.encode(preds["status"].to_list()),
              "error": strings.encode(preds["error"].to_list()),
              "score": [MISSING if s is None else int(s) for s in preds["score"].to_list()],
              "judged": strings.encode(preds["judged_by"].to_list()), "agent": [int(a is not None) for a in agent]},
        "agentChunk": AGENT_CHUNK,
        "n": {"dialogues": dialogues.height, "turns": turns.height, "predictions": preds.height},
        "s": strings.strings(),
    }


def agent_blocks(agent: list[str | None]) -> list[str]:
    """The module outputs, AGENT_CHUNK predictions per packed block: they are most of the data, and the page
    unpacks a block only when one of its rows is opened."""
    return [packed(agent[i:i + AGENT_CHUNK]) for i in range(0, len(agent), AGENT_CHUNK)]


def packed(data: Any) -> str:
    """The data as gzipped JSON in base64: a fraction of the JSON's size (the module outputs repeat a lot), and
    base64 holds no '<', so it cannot close its <script> element."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


_ASSETS = Path(__file__).with_name("transcripts_page")


def render_page(data: dict[str, Any], agent: list[str], generated: str) -> str:
    """The whole page: shell, inline CSS, the encoded data, the packed module-output blocks (a JSON list of base64
    strings) and the inline script (no network)."""
    css = (_ASSETS / "viewer.css").read_text(encoding="utf-8")
    js = (_ASSETS / "viewer.js").read_text(encoding="utf-8")
    title = f"clarify-pipeline: transcripts of {data['dataset']}"
    n = data["n"]
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{css}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p class='note'>{n['dialogues']:,} dialogues, {n['turns']:,} turns, "
        f"{n['predictions']:,} predictions; generated {html.escape(generated)} from evaluation.predictions, "
        "evaluation.judge_scores and the dialogue tables. <a href='../index.html'>report index</a></p></header>"
        "<main><section id='browse'><form id='filters' aria-label='filters'>"
        + "".join(f"<label>{lab} <select id='f-{key}' name='{key}'><option value=''>all</option></select></label>"
                  for key, lab in (("persona", "persona"), ("subtype", "subtype"), ("method", "method"),
                                   ("subject", "subject")))
        + "<label>outcome <select id='f-outcome' name='outcome'><option value=''>all</option>"
          "<option value='wrong'>has a wrong reply</option><option value='correct'>all replies correct</option>"
          "</select></label></form><p id='count' class='note'>loading…</p><ol id='list'></ol>"
          "<button id='more' type='button' hidden>show more</button></section>"
          "<section id='dialogue' aria-live='polite'><p class='note'>Pick a dialogue on the left.</p></section></main>"
        f"<script id='data' type='application/gzip+base64'>{packed(data)}</script>"
        f"<script id='agent-data' type='application/json'>{json.dumps(agent)}</script><script>{js}</script>"
        "</body></html>\n")


def write_transcripts(base: str | Path = ASSETS_DIR, clarify_must_be_question: bool = False) -> list[Path]:
    """Write assets/transcripts/<dataset>.html for every evaluated dataset (atomically); returns the paths."""
    folder = Path(base) / TRANSCRIPTS_DIR
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    paths = []
    for t in dataset_turns(base, clarify_must_be_question):
        path = folder / f"{_safe_name(t.dataset)}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, ".html") as tmp:
            agent = agent_outputs(t)
            tmp.write_text(render_page(encode(t, agent), agent_blocks(agent), generated), encoding="utf-8")
        paths.append(path)
    return paths


def transcript_pages(base: str | Path = ASSETS_DIR) -> list[Path]:
    """The transcript pages written so far (what the report index links)."""
    folder = Path(base) / TRANSCRIPTS_DIR
    return sorted(folder.glob("*.html")) if folder.is_dir() else []


def _safe_name(dataset: str) -> str:
    """A dataset name as a file name: anything but letters, digits, '-', '_' and '.' becomes '_'."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in dataset).strip(".")
    return name or "_"
