"""LLM-as-judge for generated clarifying questions (ClarifyMT-Bench §5.2.2, judge rubric in the appendix).

Pointwise: a 0-5 score of a method's question against the reference clarifying question, on a sample
of clarify turns per subtype (paper: 30). A turn where the method answered (or gave no usable reply)
while the reference asks gets 0 by the rubric's own rule, without a judge call.
Pairwise (ClariLM §4.6.2 win / tie / lose): two methods of one subject (evaluation.judge_pairs), or two subjects
with evaluation.trained_method (judge_subject_pairs: one model vs another, the paper's Fig. 4), on the same turn:
their whole replies (question or answer) without a reference (evaluation.pairwise_mode: output), or only their
questions against the reference question (reference_question). Each item is judged twice with the positions
swapped; A wins only if it wins in both orders, loses only if it loses in both, and everything else is a tie.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import polars as pl
from pydantic import WithJsonSchema

from dagster_project.config import EvaluationConfig
from dagster_project.core.clarifymt.agent.method import ask, is_question, json_string, transcript
from dagster_project.core.shared.metrics import token_f1
from dagster_project.llm.chat import ChatRequest, ChatResult
from dagster_project.llm.task import Chat, LLMTask, NonEmpty, Reply, Status

EVALUATED = (Status.OK.value, Status.PARSE_ERROR.value)
VERDICTS = ["first", "second", "tie"]


class Score(Reply):
    """The rubric's 0-5 score."""

    score: Annotated[int, WithJsonSchema({"type": "integer", "enum": [0, 1, 2, 3, 4, 5]})]


class Verdict(Reply):
    """Which of two candidate questions is better (or a tie)."""

    better: Annotated[NonEmpty, json_string(enum=VERDICTS)]


def _score_range(value: Score, _: Any) -> str | None:
    return None if 0 <= value.score <= 5 else f"score {value.score} outside 0-5"


def _verdict(value: Verdict, _: Any) -> str | None:
    return None if value.better in VERDICTS else f"verdict {value.better!r} not first/second/tie"


SCORE = LLMTask("judge_question", role="judge", reply=Score, check=_score_range,
                sampling={"temperature": 0.0, "max_tokens": 16})
PAIR = LLMTask("judge_pairwise", role="judge", reply=Verdict, check=_verdict,
               sampling={"temperature": 0.0, "max_tokens": 16})
PAIR_OUTPUT = LLMTask("judge_pairwise_output", role="judge", reply=Verdict, check=_verdict,
                      sampling={"temperature": 0.0, "max_tokens": 16})
PAIR_TASKS = {"output": PAIR_OUTPUT, "reference_question": PAIR}


def candidate_turns(pred: pl.DataFrame) -> pl.DataFrame:
    """Turns where the reference asks a clarifying question and the method's reply was evaluated."""
    return pred.filter((pl.col("reference_action") == "clarify") & pl.col("reference_question").is_not_null()
                       & pl.col("status").is_in(EVALUATED))


def sample_items(candidates: pl.DataFrame, per_subtype: int, seed: int) -> pl.DataFrame:
    """The same (dataset, dialogue_id, turn) items for every method: ``per_subtype`` per dataset x subtype."""
    items = candidates.select("dataset", "subtype", "dialogue_id", "turn").unique().sort(
        "dataset", "subtype", "dialogue_id", "turn", nulls_last=True)
    picked = []
    for (_, _), g in items.group_by(["dataset", "subtype"], maintain_order=True):
        rows = g.to_dicts()
        random.Random(seed).shuffle(rows)
        picked += rows[:per_subtype]
    return pl.DataFrame(picked, schema=items.schema).select("dataset", "dialogue_id", "turn")


def has_question(action: str | None, response: str | None) -> bool:
    """The method asked, with a non-blank question."""
    return action == "clarify" and bool((response or "").strip())


def asked_expr(action: str, response: str) -> pl.Expr:
    """Column expression of has_question: the method asked, with a non-blank question."""
    return (pl.col(action) == "clarify").fill_null(False) & (
        pl.col(response).fill_null("").str.strip_chars().str.len_chars() > 0)


def pointwise_values(row: dict[str, Any]) -> dict[str, Any]:
    """The judge_question template's values for one row (messages, reference_question, response)."""
    return {"dialogue": transcript(row["messages"] or []), "reference": row["reference_question"],
            "candidate": row["response"]}


def pointwise_requests(rows: pl.DataFrame) -> list[ChatRequest]:
    """One judge request per row (rows need messages, reference_question, response)."""
    return [SCORE.request(pointwise_values(r)) for r in rows.iter_rows(named=True)]


def parse_score(result: ChatResult) -> tuple[int | None, str, str | None]:
    """(score, status, error)."""
    if result.error:
        return None, Status.LLM_ERROR.value, result.error
    parsed = SCORE.parse(result.text)
    if parsed.value is None:
        return None, parsed.status.value, parsed.error
    return parsed.value.score, Status.OK.value, None


def shown_output(action: str | None, response: str | None) -> str:
    """A method's whole reply as the output-mode judge sees it: what it did, and its text."""
    kind = {"clarify": "Clarifying question", "answer": "Answer"}.get(action or "", "Unusable reply")
    return f"{kind}: {(response or '').strip()}"


def pairwise_values(row: dict[str, Any], mode: str = "reference_question") -> list[dict[str, Any]]:
    """The two judgements of a row: (A first, B second) then (B first, A second)."""
    d = transcript(row["messages"] or [])
    if mode == "output":
        a, b = shown_output(row["action_a"], row["output_a"]), shown_output(row["action_b"], row["output_b"])
        return [{"dialogue": d, "first": first, "second": second} for first, second in ((a, b), (b, a))]
    return [{"dialogue": d, "reference": row["reference_question"], "first": first, "second": second}
            for first, second in ((row["output_a"], row["output_b"]), (row["output_b"], row["output_a"]))]


def pairwise_requests(rows: pl.DataFrame, mode: str = "reference_question") -> list[ChatRequest]:
    """Two requests per row: (A first, B second) then (B first, A second)."""
    return [PAIR_TASKS[mode].request(v) for r in rows.iter_rows(named=True) for v in pairwise_values(r, mode)]


def parse_verdict(result: ChatResult) -> tuple[str | None, str | None]:
    """('first' | 'second' | 'tie', None) or (None, error)."""
    if result.error:
        return None, result.error
    parsed = PAIR.parse(result.text)
    return (parsed.value.better, None) if parsed.value is not None else (None, parsed.error)


def pairwise_outcome(verdict_ab: str | None, verdict_ba: str | None) -> str:
    """Outcome for A. verdict_ab judged (A first, B second); verdict_ba judged (B first, A second).

    A win must hold in both orders (A is 'first' in the first judgement and 'second' in the swapped
    one); likewise a loss; anything else, including a position-biased judge that always prefers the
    first slot, is a tie.
    """
    if verdict_ab == "first" and verdict_ba == "second":
        return "win"
    if verdict_ab == "second" and verdict_ba == "first":
        return "lose"
    return "tie"


def rule_outcome(a_asked: bool, b_asked: bool) -> str | None:
    """Outcome for A when at most one of them has something to judge: having it (a question where the reference
    asks; a usable reply in output mode) beats not."""
    if a_asked and not b_asked:
        return "win"
    if b_asked and not a_asked:
        return "lose"
    if not a_asked and not b_asked:
        return "tie"
    return None  # both asked: the judge decides


# --------------------------------------------------------------------------- the judge tables

TURN_KEY = ["dataset", "dialogue_id", "turn"]
ROW_KEY = ["dataset", "subject", "method", "dialogue_id", "turn"]
# the predictions columns judge_scores reads (its asset loads only these: a paper-scale run's traces and raw
# outputs are most of the frame)
SCORED_COLUMNS = [*ROW_KEY, "subtype", "persona", "reference_action", "reference_question", "status", "action",
                  "response"]
BertScore = Callable[[list[str], list[str]], list[float]]


def judge_scores(chat: Chat, predictions: pl.DataFrame, messages: pl.DataFrame, cfg: EvaluationConfig,
                 model: str, bertscore: BertScore | None = None, overlap: bool = False) -> pl.DataFrame:
    """Every candidate turn: judge score (sampled items where the method asked; 0 by rule where it did not),
    token-F1 and BERTScore-F1 (None without `bertscore`) of the method's output on every candidate turn.

    Averaging as ClariLM §4.3: TF and BertScore compare "the model outputs" with the expert-authored clarifying
    question on every test item that has one, with no condition on what the model decided. So every turn whose
    reference is a clarifying question is scored, whatever the method replied (its question, its answer, or
    the text of an invalid reply); an empty output scores 0. `asked` keeps the conditional view (the mean over
    the turns where the method asked) as an extra column of `question_quality`.

    messages: (dataset, dialogue_id, turn, messages) of the evaluated dialogues. overlap: compute BERTScore on a
    second thread while the judge's calls are out (for a remote judge: the encoder then runs while the calls wait)."""
    cands = candidate_turns(predictions).select(
        *ROW_KEY, "subtype", "persona", "reference_question", "action", "response")
    items = sample_items(cands, cfg.judge_per_subtype, cfg.sample_seed).with_columns(sampled=pl.lit(True))
    table = (cands.join(items, on=TURN_KEY, how="left")
             .with_columns(pl.col("sampled").fill_null(False), asked=asked_expr("action", "response"))
             .sort(*ROW_KEY).with_row_index("_row"))
    # only the sampled turns need their dialogue (the judge prompt): joining it onto every candidate turn held
    # each transcript once per method in Python dicts, the largest allocation of a paper-scale evaluation
    sampled = table.filter("sampled", "asked").join(messages, on=TURN_KEY, how="left").sort("_row")
    to_judge = [(i, SCORE, pointwise_values(r)) for i, r in zip(sampled["_row"], sampled.iter_rows(named=True))
                if is_question(r["response"])]
    responses, references = table["response"].to_list(), table["reference_question"].to_list()
    with ThreadPoolExecutor(max_workers=1) as pool:
        later = pool.submit(_bert_column, bertscore, responses, references) if overlap else None
        judged = {a.item: a for a in ask(chat, SCORE.role, to_judge)}
        bert = later.result() if later is not None else _bert_column(bertscore, responses, references)
    # built as columns: a dict per row (every candidate turn of every method) was a paper-scale run's memory peak
    verdicts = pl.DataFrame(
        [{"_row": i, "_score": a.first.value.score if a.first.ok else None, "_status": a.first.status.value,
          "_error": a.first.error, "_raw": a.result.text} for i, a in judged.items()],
        schema={"_row": table.schema["_row"], "_score": pl.Int64, "_status": pl.Utf8, "_error": pl.Utf8,
                "_raw": pl.Utf8})
    by_judge = pl.col("_status").is_not_null()
    # the reference asks but the method did not, or its "question" is none: 0 by the rubric
    by_rule = pl.col("sampled") & ~by_judge
    schema = {**cands.schema, "sampled": pl.Boolean, "asked": pl.Boolean, "judged_by": pl.Utf8, "score": pl.Int64,
              "status": pl.Utf8, "error": pl.Utf8, "raw_output": pl.Utf8, "token_f1": pl.Float64,
              "bertscore_f1": pl.Float64}
    out = table.join(verdicts, on="_row", how="left").sort("_row").with_columns(
        judged_by=pl.when(by_judge).then(pl.lit("judge")).when(by_rule).then(pl.lit("rule")),
        score=pl.when(by_judge).then("_score").when(by_rule).then(pl.lit(0, pl.Int64)),
        status=pl.when(by_judge).then("_status").when(by_rule).then(pl.lit(Status.OK.value)),
        error=pl.when(by_judge).then("_error").when(by_rule & pl.col("asked")).then(pl.lit("not a question")),
        raw_output=pl.when(by_judge).then("_raw"),
        token_f1=pl.Series([token_f1(r or "", q) for r, q in zip(responses, references, strict=True)],
                           dtype=pl.Float64),
        bertscore_f1=pl.Series(bert, dtype=pl.Float64))
    return out.select([pl.col(c).cast(t) for c, t in schema.items()]).with_columns(
        model=pl.lit(model), prompt_version=pl.lit(SCORE.version if judged else None, pl.Utf8))


def _bert_column(bertscore: BertScore | None, responses: list[str | None],
                 references: list[str]) -> list[float | None]:
    """BERTScore-F1 per candidate turn: None without a scorer, 0 for an empty output."""
    bert: list[float | None] = [0.0 if bertscore is not None else None] * len(responses)
    said = [i for i, r in enumerate(responses) if (r or "").strip()]
    if bertscore is not None and said:
        for i, b in zip(said, bertscore([responses[i] for i in said], [references[i] for i in said]), strict=True):
            bert[i] = b
    return bert


PAIR_SIDES = {"subtype": pl.Utf8, "reference_action": pl.Utf8, "reference_question": pl.Utf8, "action_a": pl.Utf8,
              "output_a": pl.Utf8, "action_b": pl.Utf8, "output_b": pl.Utf8, "method_a": pl.Utf8, "method_b": pl.Utf8,
              "subject_b": pl.Utf8, "comparison": pl.Utf8}
PAIR_RESULT = {"outcome": pl.Utf8, "judged_by": pl.Utf8, "verdict_ab": pl.Utf8, "verdict_ba": pl.Utf8,
               "status": pl.Utf8, "error": pl.Utf8, "raw_ab": pl.Utf8, "raw_ba": pl.Utf8}
PAIR_COLS = ["dataset", "subject", "dialogue_id", "turn"]
PAIR_SHARED = ["subtype", "reference_action", "reference_question"]


def output_items(evaluated: pl.DataFrame, per_dataset: int, seed: int) -> pl.DataFrame:
    """The same (dataset, dialogue_id, turn) items for every method: ``per_dataset`` evaluated turns of any
    reference action per dataset (ClariLM judged 100 per test set)."""
    items = evaluated.select(*TURN_KEY).unique().sort(*TURN_KEY)
    picked = []
    for _, g in items.group_by("dataset", maintain_order=True):
        rows = g.to_dicts()
        random.Random(seed).shuffle(rows)
        picked += rows[:per_dataset]
    return pl.DataFrame(picked, schema=items.schema)


def _pair_candidates(predictions: pl.DataFrame, cfg: EvaluationConfig) -> pl.DataFrame:
    """Every evaluated turn in output mode; clarify turns with a reference question in reference_question mode."""
    if cfg.pairwise_mode == "output":
        return predictions.filter(pl.col("status").is_in(EVALUATED))
    return candidate_turns(predictions)


def _items(cands: pl.DataFrame, cfg: EvaluationConfig) -> pl.DataFrame:
    """The judged items among `cands`: pairwise_items per dataset (output), judge_per_subtype per subtype."""
    if cfg.pairwise_mode == "output":
        return output_items(cands, cfg.pairwise_items, cfg.sample_seed)
    return sample_items(cands, cfg.judge_per_subtype, cfg.sample_seed)


def _side(cands: pl.DataFrame, x: str) -> pl.DataFrame:
    return cands.select(*PAIR_COLS, *PAIR_SHARED, pl.col("action").alias(f"action_{x}"),
                        pl.col("response").alias(f"output_{x}"))


def method_pairs(predictions: pl.DataFrame, cfg: EvaluationConfig) -> pl.DataFrame:
    """Both methods' replies on the sampled items of every evaluation.judge_pairs entry, one row per item and
    subject (`subject_b` = `subject`, comparison "methods")."""
    cands = _pair_candidates(predictions, cfg)
    items = _items(cands, cfg)
    frames = []
    for a, b in cfg.judge_pairs:
        side = [_side(cands.filter(pl.col("method") == m).join(items, on=TURN_KEY, how="semi"), x)
                for m, x in ((a, "a"), (b, "b"))]
        frames.append(side[0].join(side[1].drop(*PAIR_SHARED), on=PAIR_COLS, how="inner").with_columns(
            method_a=pl.lit(a), method_b=pl.lit(b), subject_b=pl.col("subject"), comparison=pl.lit("methods")))
    return pl.concat(frames) if frames else _empty_pairs()


def subject_pairs(predictions: pl.DataFrame, cfg: EvaluationConfig) -> pl.DataFrame:
    """Two subjects' replies with evaluation.trained_method on the items both evaluated (within
    judge_subject_datasets when set), sampled per pair like method pairs; one row per item of every
    evaluation.judge_subject_pairs entry (`subject` is A, `subject_b` is B, comparison "subjects")."""
    cands = _pair_candidates(predictions, cfg).filter(pl.col("method") == cfg.trained_method)
    if cfg.judge_subject_datasets is not None:
        cands = cands.filter(pl.col("dataset").is_in(cfg.judge_subject_datasets))
    frames = []
    for a, b in cfg.judge_subject_pairs:
        side_a, side_b = (cands.filter(pl.col("subject") == s) for s in (a, b))
        both = side_a.join(side_b.select(TURN_KEY), on=TURN_KEY, how="semi")
        items = _items(both, cfg)
        left = _side(side_a.join(items, on=TURN_KEY, how="semi"), "a")
        right = _side(side_b, "b").drop("subject", *PAIR_SHARED)
        frames.append(left.join(right, on=TURN_KEY, how="inner").with_columns(
            method_a=pl.lit(cfg.trained_method), method_b=pl.lit(cfg.trained_method), subject_b=pl.lit(b),
            comparison=pl.lit("subjects")))
    return pl.concat(frames) if frames else _empty_pairs()


def _empty_pairs() -> pl.DataFrame:
    return pl.DataFrame(schema={**{c: pl.Utf8 for c in ("dataset", "subject", "dialogue_id")}, "turn": pl.Int64,
                                **PAIR_SIDES})


def usable_expr(action: str, response: str) -> pl.Expr:
    """Output mode: the method gave a reply in the protocol (asked or answered) with some text."""
    return pl.col(action).is_in(["clarify", "answer"]).fill_null(False) & (
        pl.col(response).fill_null("").str.strip_chars().str.len_chars() > 0)


def pairwise_judgements(chat: Chat, predictions: pl.DataFrame, messages: pl.DataFrame, cfg: EvaluationConfig,
                        model: str) -> pl.DataFrame:
    """Win / tie / lose for A per pair item (method pairs, then subject pairs): by rule when at most one side has
    something to judge (asked, in reference_question mode; a usable reply, in output mode), else by the judge,
    twice with the positions swapped (a win must hold in both orders)."""
    mode, task = cfg.pairwise_mode, PAIR_TASKS[cfg.pairwise_mode]
    has = usable_expr if mode == "output" else asked_expr
    pairs = pl.concat([method_pairs(predictions, cfg), subject_pairs(predictions, cfg)]).join(
        messages, on=TURN_KEY, how="left").with_columns(
        judgeable_a=has("action_a", "output_a"), judgeable_b=has("action_b", "output_b"))
    rows = pairs.to_dicts()
    jobs = [((i, order), task, values) for i, r in enumerate(rows) if r["judgeable_a"] and r["judgeable_b"]
            for order, values in zip(("ab", "ba"), pairwise_values(r, mode), strict=True)]
    answers = {a.item: a for a in ask(chat, task.role, jobs)}
    extra = []
    for i, r in enumerate(rows):
        rule = rule_outcome(r["judgeable_a"], r["judgeable_b"])
        if rule is not None:
            extra.append({"outcome": rule, "judged_by": "rule", "verdict_ab": None, "verdict_ba": None,
                          "status": Status.OK.value, "error": None, "raw_ab": None, "raw_ba": None})
            continue
        ab, ba = answers[(i, "ab")], answers[(i, "ba")]
        v_ab, v_ba = (a.first.value.better if a.first.ok else None for a in (ab, ba))
        err = ab.first.error or ba.first.error
        status = Status.OK if not err else (
            Status.LLM_ERROR if ab.result.error or ba.result.error else Status.PARSE_ERROR)
        extra.append({"outcome": pairwise_outcome(v_ab, v_ba) if not err else None, "judged_by": "judge",
                      "verdict_ab": v_ab, "verdict_ba": v_ba, "status": status.value, "error": err,
                      "raw_ab": ab.result.text, "raw_ba": ba.result.text})
    return pl.concat([pairs.drop("messages"), pl.DataFrame(extra, schema=PAIR_RESULT)], how="horizontal").with_columns(
        mode=pl.lit(mode), model=pl.lit(model), prompt_version=pl.lit(task.version if answers else None, pl.Utf8))


def pairwise_summary(pairwise: pl.DataFrame) -> pl.DataFrame:
    """Win / tie / lose per comparison, dataset and pair (A = subject x method_a, B = subject_b x method_b): counts
    of decided items (n) and shares; `errors` counts items whose judge call failed (no outcome, not in n)."""
    pw = pairwise.with_columns(
        **({} if "subject_b" in pairwise.columns else {"subject_b": pl.col("subject")}),
        **({} if "comparison" in pairwise.columns else {"comparison": pl.lit("methods")}))
    keys = ["comparison", "dataset", "subject", "subject_b", "method_a", "method_b"]
    decided = pl.col("outcome").is_not_null()
    return pw.group_by(keys).agg(
        decided.sum().alias("n"), *[(pl.col("outcome") == o).sum().alias(o) for o in ("win", "tie", "lose")],
        *[((pl.col("outcome") == o).sum() / decided.sum()).alias(f"{o}_share") for o in ("win", "tie", "lose")],
        (pl.col("judged_by") == "judge").sum().alias("judged_by_llm"), (~decided).sum().alias("errors"),
    ).sort(keys)
