"""The evaluation report's charts: matplotlib figures from the report's tables, at most MAX_SERIES series per chart
(small multiples otherwise), and their PNG bytes."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from dagster_project.core.clarifymt.report import PERSONA_ABBR, SUBTYPE_ORDER, ReportInputs

MAX_SERIES = 8  # bars, lines or point groups in one chart; more are split into small multiples


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")  # keeps a legend placed outside the axes
    plt.close(fig)
    return buf.getvalue()


def _legend_outside(ax) -> None:
    """The legend right of the axes, so it never covers bars or points (the saved PNG is cropped to fit it)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


@dataclass
class Panel:
    """One chart of a small-multiples figure: its title and its series (rows with dataset, subject, method)."""

    title: str
    rows: list[dict]

    def label(self, r: dict) -> str:
        """The method alone when the panel holds one subject, else subject/method (the dataset is in the title)."""
        return r["method"] if len({x["subject"] for x in self.rows}) == 1 else f"{r['subject']}/{r['method']}"


def series_panels(rows: Sequence[dict]) -> list[Panel]:
    """Series split into panels of at most MAX_SERIES: one per dataset; a dataset with more is packed by subject:
    a subject with more series is cut into even parts, the others stay whole and share charts (first fit)."""
    panels: list[Panel] = []
    by_dataset: dict[str, list[dict]] = {}
    for r in rows:
        by_dataset.setdefault(r["dataset"], []).append(r)
    for dataset, part in by_dataset.items():
        by_subject: dict[str, list[dict]] = {}
        for r in part:
            by_subject.setdefault(r["subject"], []).append(r)
        chunks: list[list[dict]] = []
        for series in (x for x in by_subject.values() if len(x) > MAX_SERIES):  # cut into even parts
            size = -(-len(series) // -(-len(series) // MAX_SERIES))
            chunks += [series[i:i + size] for i in range(0, len(series), size)]
        shared: list[list[dict]] = []
        for series in (x for x in by_subject.values() if len(x) <= MAX_SERIES):  # whole, first chart with room
            room = next((c for c in shared if len(c) + len(series) <= MAX_SERIES), None)
            if room is None:
                shared.append(list(series))
            else:
                room += series
        chunks += shared
        for i, chunk in enumerate(chunks, start=1):
            subjects = list(dict.fromkeys(r["subject"] for r in chunk))
            who = subjects[0] if len(subjects) == 1 else f"{len(subjects)} subjects"
            more = f" ({i}/{len(chunks)})" if len(chunks) > 1 else ""
            panels.append(Panel(f"{dataset}: {who}{more}", chunk))
    return panels


def _grid(n: int, width: float = 9.0, height: float = 3.2):
    """A figure with n stacked axes (one column: each legend sits right of its chart)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(n, 1, figsize=(width, height * n), squeeze=False)
    return fig, list(axes.flat)


def accuracy_by_turn_figure(by_turn: pl.DataFrame, label: Callable[[dict], str] | None = None):
    """Accuracy over the turns, one line per dataset x subject x method, at most MAX_SERIES lines per chart
    (series_panels); x ticks are the turns (integers). `label` overrides the panel's series labels."""
    series = [{"dataset": d, "subject": s, "method": m, "frame": g.sort("turn")}
              for (d, s, m), g in by_turn.group_by(["dataset", "subject", "method"], maintain_order=True)]
    panels = series_panels(series)
    fig, axes = _grid(len(panels), 6.5, 3.3)
    for ax, panel in zip(axes, panels, strict=True):
        for r in panel.rows:
            g = r["frame"]
            ax.plot(g["turn"].to_list(), (g["accuracy"] * 100).to_list(), marker="o",
                    label=label(r) if label else panel.label(r))
        ax.set_xticks(sorted(int(t) for t in by_turn["turn"].drop_nulls().unique()))
        ax.set(xlabel="turn", ylabel="accuracy (%)", ylim=(0, 100),
               title=f"Clarification accuracy by turn: {panel.title}")
        _legend_outside(ax)
    return fig


def _persona_figure(scope: pl.DataFrame, turn: int):
    """Tables 5's numbers as grouped bars: personas (and Avg) on x, one bar per method, per panel."""
    import numpy as np

    keys = list(PERSONA_ABBR)
    panels = series_panels(scope.to_dicts())
    fig, axes = _grid(len(panels), 9.0, 3.4)
    x = np.arange(len(keys) + 1)
    for ax, panel in zip(axes, panels, strict=True):
        width = 0.8 / len(panel.rows)
        for i, r in enumerate(panel.rows):
            vals = [(r.get(k) if r.get(k) is not None else np.nan) for k in keys] + [r["persona_avg"] or np.nan]
            ax.bar(x + i * width - 0.4 + width / 2, np.array(vals, dtype=float) * 100, width, label=panel.label(r))
        ax.set_xticks(x, [*PERSONA_ABBR.values(), "Avg"])
        ax.set(ylabel="accuracy (%)", ylim=(0, 100), title=f"Accuracy by persona, turn {turn}: {panel.title}")
        _legend_outside(ax)
    return fig


def _cost_figure(allt: pl.DataFrame):
    """LLM calls per turn vs accuracy over all turns: one point per method, per panel (n = 0 rows left out)."""
    rows = [r for r in allt.to_dicts() if r["accuracy"] is not None and r["calls_per_turn"] is not None]
    panels = series_panels(rows)
    if not panels:
        return None
    fig, axes = _grid(len(panels), 6.5, 3.6)
    for ax, panel in zip(axes, panels, strict=True):
        for r in panel.rows:
            ax.scatter(r["calls_per_turn"], r["accuracy"] * 100, label=panel.label(r))
        ax.set(xlabel="LLM calls per turn", ylabel="accuracy (%, all turns)", ylim=(0, 100),
               title=f"Cost vs accuracy: {panel.title}")
        _legend_outside(ax)
    return fig


def _heatmap_figure(sub: pl.DataFrame, label: Callable[[dict], str]):
    """Subtype x turn accuracy (Table 4's numbers), one heatmap per dataset x subject x method (at most 12)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = list(sub.group_by(["dataset", "subject", "method"], maintain_order=True))[:12]
    cols = min(3, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False, layout="constrained")
    for ax, ((d, s, meth), g) in zip(axes.flat, groups):
        subtypes = [x for x in SUBTYPE_ORDER if x in set(g["subtype"])] + sorted(
            set(g["subtype"].drop_nulls()) - set(SUBTYPE_ORDER))
        turns = sorted(g["turn"].unique().to_list())
        grid = np.full((len(turns), len(subtypes)), np.nan)
        for r in g.iter_rows(named=True):
            if r["subtype"] in subtypes and r["accuracy"] is not None:
                grid[turns.index(r["turn"]), subtypes.index(r["subtype"])] = r["accuracy"] * 100
        im = ax.imshow(grid, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(subtypes)), [x[:4] for x in subtypes], fontsize=6, rotation=60)
        ax.set_yticks(range(len(turns)), [f"t{t}" for t in turns], fontsize=7)
        ax.set_title(label({"dataset": d, "subject": s, "method": meth}), fontsize=8)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes, shrink=0.6, label="accuracy (%)")
    return fig


def _judge_figure(scored: pl.DataFrame):
    """Mean judge score by subtype (Figure 3): subtypes on x, one bar per method, per panel."""
    import numpy as np

    agg = scored.group_by("dataset", "subject", "method", "subtype").agg(pl.col("score").mean())
    subtypes = [x for x in SUBTYPE_ORDER if x in set(agg["subtype"])] + sorted(
        set(agg["subtype"].drop_nulls()) - set(SUBTYPE_ORDER))
    lookup = {(r["dataset"], r["subject"], r["method"], r["subtype"]): r["score"] for r in agg.iter_rows(named=True)}
    series = agg.select("dataset", "subject", "method").unique().sort("dataset", "subject", "method").to_dicts()
    panels = series_panels(series)
    fig, axes = _grid(len(panels), 9.0, 3.4)
    for ax, panel in zip(axes, panels, strict=True):
        width = 0.8 / len(panel.rows)
        for i, r in enumerate(panel.rows):
            ax.bar(np.arange(len(subtypes)) + i * width - 0.4 + width / 2,
                   [lookup.get((r["dataset"], r["subject"], r["method"], s), np.nan) for s in subtypes], width,
                   label=panel.label(r))
        ax.set_xticks(range(len(subtypes)), subtypes, fontsize=7, rotation=45)
        ax.set(ylabel="judge score (0-5)", ylim=(0, 5), title=f"Clarifying-question quality by subtype: {panel.title}")
        _legend_outside(ax)
    return fig


def report_figures(inputs: ReportInputs) -> dict:
    """Matplotlib figures by file name: accuracy by persona per method, LLM calls per turn vs accuracy, accuracy
    by turn, subtype x turn heatmaps, judge score by subtype; no chart has more than MAX_SERIES series."""
    out: dict = {}
    m, cmp = inputs.metric_tables, inputs.method_comparison
    scope = cmp.filter(pl.col("scope") == f"turn_{inputs.comparison_turn}") if cmp.height else cmp
    if scope.height:
        out["accuracy_by_persona.png"] = _persona_figure(scope, inputs.comparison_turn)
    allt = cmp.filter(pl.col("scope") == "all_turns") if cmp.height else cmp
    if allt.height and allt["calls_per_turn"].is_not_null().any():
        fig = _cost_figure(allt)
        if fig is not None:
            out["calls_vs_accuracy.png"] = fig
    by_turn = m.filter(pl.col("breakdown") == "by_turn")
    if by_turn.height:
        out["accuracy_by_turn.png"] = accuracy_by_turn_figure(by_turn)
    sub = m.filter(pl.col("breakdown") == "by_subtype_turn")
    if sub.height:
        single = sub["dataset"].n_unique() == 1 and sub["subject"].n_unique() == 1
        out["subtype_turn_heatmap.png"] = _heatmap_figure(
            sub, lambda r: r["method"] if single else f"{r['dataset']}/{r['subject']}/{r['method']}")
    js = inputs.judge_scores
    scored = js.filter(pl.col("score").is_not_null()) if js.height else js
    if scored.height:
        out["judge_by_subtype.png"] = _judge_figure(scored)
    return out


def report_plots(inputs: ReportInputs) -> dict[str, bytes]:
    """PNG bytes by file name of every report_figures figure."""
    return {name: _png(fig) for name, fig in report_figures(inputs).items()}
