"""Group `evaluation`: subject-model predictions on every dialogue turn, metric tables and the report."""


from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.core.agent.base import METHOD as BASE, base_requests, parse_predictions
from dagster_project.core.metrics import metric_tables as compute_metric_tables
from dagster_project.core.report import markdown_table, render_report
from dagster_project.resources.llm import LLMResource
from dagster_project.resources.params import ParamsResource
from dagster_project.resources.warehouse import ASSETS_DIR

GROUP = "evaluation"
EVALUATED = ["ok", "parse_error"]  # invalid replies count as wrong; LLM / input failures are excluded


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"persona_dialogues": dg.AssetIn(key=["benchmark", "persona_dialogues"])})
def predictions(context: dg.AssetExecutionContext, params: ParamsResource, llm: LLMResource,
                persona_dialogues: pl.DataFrame) -> pl.DataFrame:
    """One row per (subject, method, dialogue turn): prompt reply, parsed action, question, status."""
    p = params.load()
    usable = persona_dialogues.filter(pl.col("status") == "ok")
    skipped = persona_dialogues.filter(pl.col("status") != "ok")
    keep = ["dialogue_id", "query_id", "subtype", "persona", "turn", "reference_action", "reference_question"]
    frames, meta = [], {}
    for subject in p.llm.subjects:
        for method in p.evaluation.methods:
            if method != BASE:
                raise ValueError(f"evaluation.methods: {method!r} is not implemented yet")
            reqs = base_requests(usable["messages"].to_list(), p.evaluation.subject_max_tokens)
            results = llm.chat(f"subject:{subject}", reqs, context)
            parsed = parse_predictions(results)
            done = pl.concat([usable.select(keep), parsed], how="horizontal").with_columns(
                prompt_version=pl.lit(reqs[0].prompt_version if reqs else None, pl.Utf8))
            lost = skipped.select(*keep, "status").with_columns(
                action=pl.lit("invalid"), status=pl.lit("input_error"),
                error=pl.format("dialogue turn not usable: {}", pl.col("status")))
            frames.append(pl.concat([done, lost], how="diagonal_relaxed").with_columns(
                subject=pl.lit(subject), method=pl.lit(method)))
            meta |= {f"{subject}/{method}/{k}": v for k, v in llm.usage(f"subject:{subject}", results).items()}
            meta[f"{subject}/{method}/parse_errors"] = int((parsed["status"] == "parse_error").sum())
    out = pl.concat(frames, how="diagonal_relaxed").with_columns(source=pl.lit("benchmark.persona_dialogues"))
    out = out.select("subject", "method", *[c for c in out.columns if c not in ("subject", "method")])
    context.add_output_metadata(meta | {"rows": out.height})
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"predictions": dg.AssetIn(key=[GROUP, "predictions"])})
def metric_tables(context: dg.AssetExecutionContext, predictions: pl.DataFrame) -> pl.DataFrame:
    """Accuracy, under-/over-clarification overall, by turn, persona, subtype and subtype x turn."""
    evaluated = predictions.filter(pl.col("status").is_in(EVALUATED))
    out = compute_metric_tables(evaluated)
    overall = out.filter(pl.col("breakdown") == "overall")
    context.add_output_metadata({
        "evaluated_turns": evaluated.height, "excluded_turns": predictions.height - evaluated.height,
        "overall": dg.MetadataValue.md(markdown_table(overall.drop("persona", "subtype", "turn"))),
    })
    return out


@dg.asset(key_prefix=GROUP, group_name=GROUP, kinds={"polars"},
          ins={"metric_tables": dg.AssetIn(key=[GROUP, "metric_tables"]),
               "predictions": dg.AssetIn(key=[GROUP, "predictions"])})
def report(context: dg.AssetExecutionContext, metric_tables: pl.DataFrame, predictions: pl.DataFrame) -> pl.DataFrame:
    """Markdown + HTML report with an accuracy-by-turn plot under assets/evaluation/report/."""
    import markdown as md
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(ASSETS_DIR) / GROUP / "report"
    folder.mkdir(parents=True, exist_ok=True)
    by_turn = metric_tables.filter(pl.col("breakdown") == "by_turn")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for (subject, method), g in by_turn.group_by(["subject", "method"], maintain_order=True):
        g = g.sort("turn")
        ax.plot(g["turn"].to_list(), (g["accuracy"] * 100).to_list(), marker="o", label=f"{subject} / {method}")
    ax.set(xlabel="turn", ylabel="accuracy (%)", ylim=(0, 100), title="Clarification accuracy by turn")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plot = folder / "accuracy_by_turn.png"
    fig.savefig(plot, dpi=120)
    plt.close(fig)
    text = render_report(metric_tables, predictions, plot.name)
    (folder / "report.md").write_text(text)
    (folder / "report.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>ClarifyMT-Bench report</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px}</style>" + md.markdown(text, extensions=["tables"]))
    files = [folder / n for n in ("report.md", "report.html", plot.name)]
    context.add_output_metadata({"report": dg.MetadataValue.path(str(folder / "report.html")),
                                 "preview": dg.MetadataValue.md(text)})
    return pl.DataFrame({"file": [str(f) for f in files], "bytes": [f.stat().st_size for f in files]})
