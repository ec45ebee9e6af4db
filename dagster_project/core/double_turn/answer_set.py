"""Table 1 (avg turns, answer-set F1 Unambiguous / Ambiguous / Total per subject x system) and Table 4
(Direct-Answer rate and accuracy of Clarify-or-Direct, and the random baseline at the same DA%)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from dagster_project.core.double_turn.evaluation import SYSTEM_LABELS, SYSTEMS
from dagster_project.core.double_turn.metrics import (
    direct_answer_accuracy,
    paired_bootstrap_p,
    random_decision_baseline,
)
from dagster_project.llm.task import Status

# an unusable reply counts as wrong; LLM failures are excluded (and counted in n_excluded)
EVALUATED = (Status.OK.value, Status.PARSE_ERROR.value)


def significance(ev: pl.DataFrame, samples: int, seed: int, alpha: float) -> dict[str, dict[str, Any]]:
    """Table 1's bold: per system, the paired-bootstrap p-value of its F1 against every other system over the
    queries both were evaluated on; ``significant`` when every one is below alpha (paper: N=10,000, p<0.01)."""
    f1 = {s: dict(zip(g["query_id"], g["f1"], strict=True))
          for (s,), g in ev.group_by(["system"], maintain_order=True)}
    out = {}
    for system in SYSTEMS:
        ps = {}
        for other in SYSTEMS:
            common = sorted(set(f1.get(system, {})) & set(f1.get(other, {})))
            if other != system and common:
                ps[other] = paired_bootstrap_p([f1[system][q] for q in common], [f1[other][q] for q in common],
                                               samples, seed)
        worst = max(ps.values()) if ps else None
        out[system] = {"p_max_vs_others": worst, "significant": worst is not None and worst < alpha,
                       "p_values": json.dumps({k: round(v, 4) for k, v in ps.items()})}
    return out


def answer_set_table(interactions: pl.DataFrame, repeats: int, seed: int, bootstrap_samples: int = 10_000,
                     alpha: float = 0.01) -> pl.DataFrame:
    """Table 1 (avg turns, F1 Unambiguous / Ambiguous / Total, significance against every other system) per
    subject x system, with Table 4's DA% and Direct-Answer accuracy for Clarify-or-Direct and the random
    baseline at the same DA%."""
    out = []
    for (subject,), sub in interactions.group_by(["subject"], maintain_order=True):
        ev = sub.filter(pl.col("status").is_in(EVALUATED))
        sig = significance(ev, bootstrap_samples, seed, alpha)
        for system in SYSTEMS:
            rows = ev.filter(pl.col("system") == system)
            excluded = sub.filter(pl.col("system") == system).height - rows.height
            out.append(_table_row(subject, system, rows, excluded) | sig[system])
        # Table 4: decisions of Clarify-or-Direct vs a random decision at the same DA%
        wide = {}
        for system in ("direct_greedy", "clarify", "clarify_or_direct"):
            for r in ev.filter(pl.col("system") == system).iter_rows(named=True):
                wide.setdefault(r["query_id"], {})[system] = r
        complete = [w for w in wide.values() if len(w) == 3]
        cod = out[-1]
        if complete:
            should = [not w["direct_greedy"]["is_ambiguous"] and w["direct_greedy"]["f1"] == 1.0 for w in complete]
            answered = [w["clarify_or_direct"]["action"] == "answer" for w in complete]
            da_rate = sum(answered) / len(complete)
            cod.update(da_rate=da_rate, da_accuracy=direct_answer_accuracy(answered, should))
            base = random_decision_baseline([w["direct_greedy"]["f1"] for w in complete],
                                            [w["clarify"]["f1"] for w in complete], should, da_rate, repeats, seed)
            amb = [w["direct_greedy"]["is_ambiguous"] for w in complete]
            out.append({
                "subject": subject, "system": "random_baseline", "label": SYSTEM_LABELS["random_baseline"],
                "n_queries": len(complete), "n_excluded": 0, "avg_turns": 2 - base["da_rate"],
                "f1_unambiguous": _mean([f for f, a in zip(base["per_query_f1"], amb) if not a]),
                "f1_ambiguous": _mean([f for f, a in zip(base["per_query_f1"], amb) if a]),
                "f1_total": base["f1"], "n_unambiguous": amb.count(False), "n_ambiguous": amb.count(True),
                "da_rate": base["da_rate"], "da_accuracy": base["da_accuracy"], "repeats": repeats,
                "p_max_vs_others": None, "significant": None, "p_values": None,
            })
    return pl.DataFrame(out, schema={
        "subject": pl.Utf8, "system": pl.Utf8, "label": pl.Utf8, "n_queries": pl.Int64, "n_excluded": pl.Int64,
        "avg_turns": pl.Float64, "f1_unambiguous": pl.Float64, "f1_ambiguous": pl.Float64, "f1_total": pl.Float64,
        "n_unambiguous": pl.Int64, "n_ambiguous": pl.Int64, "da_rate": pl.Float64, "da_accuracy": pl.Float64,
        "repeats": pl.Int64, "p_max_vs_others": pl.Float64, "significant": pl.Boolean, "p_values": pl.Utf8})


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _table_row(subject: str, system: str, rows: pl.DataFrame, excluded: int) -> dict[str, Any]:
    amb = rows.filter(pl.col("is_ambiguous"))
    una = rows.filter(~pl.col("is_ambiguous"))
    return {"subject": subject, "system": system, "label": SYSTEM_LABELS[system], "n_queries": rows.height,
            "n_excluded": excluded, "avg_turns": _mean(rows["turns"].to_list()),
            "f1_unambiguous": _mean(una["f1"].to_list()), "f1_ambiguous": _mean(amb["f1"].to_list()),
            "f1_total": _mean(rows["f1"].to_list()), "n_unambiguous": una.height, "n_ambiguous": amb.height,
            "da_rate": None, "da_accuracy": None, "repeats": None}
