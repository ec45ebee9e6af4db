"""Markdown rendering of the evaluation tables (pure: tables in, text out)."""

from __future__ import annotations

import polars as pl

from dagster_project.core.taxonomy import PERSONAS

_PCT = ["accuracy", "under_clarification", "over_clarification", "invalid"]


def markdown_table(df: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; floats (all of them shares here) shown as percentages."""
    if df.is_empty():
        return "_(no rows)_\n"
    cols = df.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        cells = [f"{v * 100:.1f}" if isinstance(v, float) else ("" if v is None else str(v)) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def persona_pivot(tables: pl.DataFrame) -> pl.DataFrame:
    """Paper Table 3 layout: one row per subject x method, accuracy per persona, then the average."""
    t = tables.filter(pl.col("breakdown") == "by_persona")
    if t.is_empty():
        return t
    wide = t.pivot(on="persona", index=["subject", "method"], values="accuracy")
    order = [p.key for p in PERSONAS if p.key in wide.columns]
    # the paper's Avg. is the unweighted mean of the persona columns
    return wide.select("subject", "method", *order).with_columns(avg=pl.mean_horizontal(order))


def render_report(tables: pl.DataFrame, predictions: pl.DataFrame, plot_name: str | None) -> str:
    """The evaluation report: overall, per persona (Table 3), per turn, per subtype x turn (Table 4)."""
    excluded = predictions.filter(~pl.col("status").is_in(["ok", "parse_error"])).height
    parts = [
        "# ClarifyMT-Bench evaluation report\n",
        f"Evaluated turns: {predictions.height - excluded} (excluded for LLM / input errors: {excluded}).",
        "Accuracy, under- and over-clarification and invalid replies are shares of evaluated turns (%).\n",
        "## Overall\n",
        markdown_table(tables.filter(pl.col("breakdown") == "overall").select("subject", "method", "n", *_PCT)),
        "## Accuracy by persona (Table 3 layout)\n",
        markdown_table(persona_pivot(tables)),
        "## By turn\n",
        markdown_table(tables.filter(pl.col("breakdown") == "by_turn").select("subject", "method", "turn", "n", *_PCT)),
    ]
    if plot_name:
        parts.append(f"![accuracy by turn]({plot_name})\n")
    sub = tables.filter(pl.col("breakdown") == "by_subtype_turn")
    if not sub.is_empty():
        wide = sub.pivot(on="subtype", index=["subject", "method", "turn"], values="accuracy").sort(
            "subject", "method", "turn")
        parts += ["## Accuracy by subtype x turn (Table 4 layout)\n", markdown_table(wide)]
    return "\n".join(parts)
