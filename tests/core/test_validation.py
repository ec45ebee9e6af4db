"""Manual validation round trip (ClarifyMT-Bench §4.2): review sheet out, filled sheet in, automatic filter."""

import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score

from dagster_project.config.clarifymt import ValidationConfig
from dagster_project.core.clarifymt.validation import (
    SHEET_COLUMNS,
    agreement,
    human_decision,
    is_echo,
    item_id,
    read_sheet,
    review_sheet,
    validate,
)
from dagster_project.llm.chat import ChatResult


def rows(queries, quality=None, kept=None, status=None):
    n = len(queries)
    return pl.DataFrame({
        "query_id": [f"lexical-{i:03d}" for i in range(n)], "subtype": ["lexical"] * n,
        "source": ["generator"] * n, "query": queries, "clarifying_question": ["Which one?"] * n,
        "quality": quality or [4] * n, "kept": kept or [True] * n, "status": status or ["ok"] * n,
    })


def fits_chat(answers, sent):
    """The judge answers the subtype check with `answers[query]` (default: fits)."""
    def chat(role, requests):
        sent.extend((role, r) for r in requests)
        out = []
        for r in requests:
            text = r.messages[-1]["content"]
            fit = next((v for q, v in answers.items() if q in text), True)
            out.append(ChatResult(texts=[f'{{"fits": {str(fit).lower()}}}']))
        return out
    return chat


def test_item_id_is_stable_over_case_and_spacing():
    assert item_id("What is  Bass?") == item_id("what is bass?") != item_id("what is a bass?")
    assert len(item_id("x")) == 12


@pytest.mark.parametrize("q,echo", [
    ('A user asked: "What can you tell me about bass?"', True), ("User request: book a table", True),
    ("Query: find me a flight", True), ("  a user asks: where is it", True), ("User-friendly apps for kids?", False),
    ("What can you tell me about bass?", True), ("find reviews of laptops by students from germany", True),
    ("The user assumes context the assistant does not share, so we need a question.", True),
    ("What can you tell me about bass fishing?", False), ("Usernames for my game?", False), ("", False),
    (None, False)])
def test_is_echo(q, echo):
    assert is_echo(q) is echo


def test_automatic_filter_removes_echo_low_rating_and_off_category_with_reasons():
    df = rows(['A user asked: "Book it for me"', "Tell me about bass.", "Plan my trip.", "Which bank?", "Dup?"],
              quality=[5, 1, 4, 4, 4], kept=[True, True, True, True, False])
    sent = []
    out, summary = validate(fits_chat({"Plan my trip.": False}, sent), df, ValidationConfig(), None)
    assert out["removed_by"].to_list() == ["prompt_echo", "low_rating", "off_category", None, None]
    assert out["valid"].to_list() == [False, False, False, True, False]
    assert out["validation_path"].to_list() == ["automatic"] * 4 + [None]  # the dedup-removed row is not validated
    assert summary["path"] == "automatic" and summary["kappa"] is None
    assert (summary["removed_prompt_echo"], summary["removed_low_rating"], summary["removed_off_category"]) == (1, 1, 1)
    # the echo is not worth a judge call; every other validated row is checked once, by the judge role
    assert [role for role, _ in sent] == ["judge"] * 3


def test_unusable_subtype_check_or_missing_rating_removes_nothing():
    df = rows(["Tell me about bass.", "Which bank?"], quality=[None, 4])
    chat = lambda role, reqs: [ChatResult(texts=["not json"]) for _ in reqs]
    out, _ = validate(chat, df, ValidationConfig(), None)
    assert out["valid"].to_list() == [True, True]
    assert out["fit_status"].to_list() == ["parse_error", "parse_error"]


def test_subtype_check_can_be_switched_off():
    sent = []
    out, _ = validate(fits_chat({}, sent), rows(["Tell me about bass."]), ValidationConfig(subtype_check=False), None)
    assert sent == [] and out["valid"].to_list() == [True]


def test_review_sheet_is_a_seeded_sample_with_empty_annotator_columns():
    df = rows([f"request number {i}?" for i in range(30)], kept=[i % 3 != 0 for i in range(30)])
    sheet = review_sheet(df, 0.1, seed=7)
    assert sheet.columns == SHEET_COLUMNS and sheet.height == 2  # 10% of the 20 kept rows
    assert sheet.equals(review_sheet(df, 0.1, seed=7)) and not sheet.equals(review_sheet(df, 0.1, seed=8))
    assert set(sheet["query_id"]) <= set(df.filter("kept")["query_id"])
    assert sheet["item_id"].to_list() == [item_id(q) for q in sheet["query"]]
    assert sheet.select("keep_1", "keep_2", "rating_1", "rating_2").null_count().row(0) == (2, 2, 2, 2)
    assert review_sheet(rows(["only one?"]), 0.1, 0).height == 1  # at least one row


def test_filled_sheet_round_trip(tmp_path):
    queries = ["Tell me about bass.", "Which bank?", "Plan my trip.", "Book it.", "Fix my car."]
    df = rows(queries, quality=[5, 2, 4, 3, 4])
    sheet = review_sheet(df, 1.0, seed=0).sort("query_id")
    filled = sheet.with_columns(
        keep_1=pl.Series(["keep", "remove", "keep", "keep", "1"]),
        keep_2=pl.Series(["keep", "remove", "remove", "keep", "yes"]),
        rating_1=pl.Series(["5", "1", "4", "", "4"]), rating_2=pl.Series(["4", "2", "3", "", "5"]),
        judge_rating=pl.Series([5, 2, 1, 3, 4]))  # an edited rating: this run's rating (4) of the query counts
    # one more row that matches no query of this run: counted, changes nothing
    extra = filled.head(1).with_columns(item_id=pl.lit("000000000000"), query=pl.lit("an old query"))
    path = tmp_path / "filled.csv"
    pl.concat([filled, extra]).write_csv(path)
    out, summary = validate(fits_chat({}, []), df, ValidationConfig(), read_sheet(str(path)))
    assert out.sort("query_id")["removed_by"].to_list() == [None, "human", "human", None, None]
    assert set(out["validation_path"]) == {"human"}
    assert summary["path"] == "human" and summary["removed_human"] == 2
    assert (summary["sheet_rows"], summary["sheet_rows_matched"], summary["sheet_rows_unmatched"]) == (6, 5, 1)
    k1 = ["keep", "remove", "keep", "keep", "keep", "keep"]
    k2 = ["keep", "remove", "remove", "keep", "keep", "keep"]
    assert summary["kappa"] == pytest.approx(cohen_kappa_score(k1, k2))
    assert summary["observed_agreement"] == pytest.approx(5 / 6)
    # sheet order: items 0..4 then the unmatched extra row (the sheet's rating, 5); item 3 unrated
    judge = [5, 2, 4, 4, 5]
    human = [4.5, 1.5, 3.5, 4.5, 4.5]
    assert summary["pearson_r"] == pytest.approx(pl.DataFrame({"a": judge, "b": human}).corr()[0, 1])


def test_sheet_with_bad_label_quarantines_the_row(tmp_path):
    path = tmp_path / "s.csv"
    pl.DataFrame({"item_id": ["a", "b", ""], "keep_1": ["keep", "perhaps", "keep"],
                  "keep_2": ["keep", "keep", "keep"]}).write_csv(path)
    sheet = read_sheet(str(path))
    assert sheet.rows["item_id"].to_list() == ["a"]
    assert sorted(r["field"] for r in sheet.rejected.rows) == ["item_id", "keep_1"]


@pytest.mark.parametrize("a,b,rule,expected", [
    (True, True, "remove", True), (False, False, "remove", False), (True, False, "remove", False),
    (True, False, "keep", True), (None, False, "keep", False), (None, None, "remove", None)])
def test_human_decision(a, b, rule, expected):
    assert human_decision(a, b, rule) is expected


def test_agreement_without_ratings_has_no_r():
    s = pl.DataFrame({"item_id": ["a", "b"], "keep_1": [True, False], "keep_2": [True, True],
                      "rating_1": [None, None], "rating_2": [None, None], "judge_rating": [4.0, 3.0]},
                     schema_overrides={"rating_1": pl.Float64, "rating_2": pl.Float64})
    a = agreement(s)
    assert a["double_annotated"] == 2 and a["pearson_r"] is None and a["observed_agreement"] == 0.5
