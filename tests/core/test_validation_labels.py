"""Issue 27.6: the validation round says what it is. The shipped example sheet carries labels the project wrote:
annotation_agreement and the report call them illustrative; only a user's own sheet counts as human agreement."""

import shutil


from dagster_project.core.clarifymt.report import _validation_section
from dagster_project.core.clarifymt.validation import ILLUSTRATIVE, SHIPPED_EXAMPLE, agreement_table

SUMMARY = {"path": "human", "sheet_rows": 11, "sheet_rows_matched": 9, "sheet_rows_unmatched": 2,
           "sheet_rows_rejected": 0, "validated_rows": 20, "decided_by_human": 9, "decided_automatically": 11,
           "valid": 17, "removed_human": 2, "removed_prompt_echo": 1, "removed_low_rating": 0,
           "removed_off_category": 0, "double_annotated": 9, "observed_agreement": 0.89, "kappa": 0.6, "rated": 9,
           "pearson_r": 0.5}


def test_the_shipped_example_is_illustrative_by_path_and_by_bytes(tmp_path):
    assert SHIPPED_EXAMPLE.is_file()
    for path in ("data/benchmark/review_sheet_example.csv", str(SHIPPED_EXAMPLE)):
        row = agreement_table(SUMMARY, path).row(0, named=True)
        assert (row["path"], row["labels"]) == ("illustrative_sheet", ILLUSTRATIVE)
    copy = tmp_path / "my_sheet.csv"
    shutil.copy(SHIPPED_EXAMPLE, copy)
    assert agreement_table(SUMMARY, str(copy))["labels"].to_list() == [ILLUSTRATIVE]


def test_a_users_own_sheet_is_human_agreement(tmp_path):
    own = tmp_path / "filled.csv"
    own.write_text(SHIPPED_EXAMPLE.read_text().replace("keep,keep", "keep,remove", 1))
    row = agreement_table(SUMMARY, str(own)).row(0, named=True)
    assert (row["path"], row["labels"]) == ("human", "annotators")
    text = "\n".join(_validation_section(agreement_table(SUMMARY, str(own))))
    assert "human agreement of the user's annotators" in text and ILLUSTRATIVE not in text


def test_the_report_says_illustrative_for_the_shipped_sheet():
    text = "\n".join(_validation_section(agreement_table(SUMMARY, str(SHIPPED_EXAMPLE))))
    assert ILLUSTRATIVE in text and "illustrative_sheet" in text
    assert ILLUSTRATIVE == "illustrative labels written by the project, not an annotation study"


def test_no_sheet_is_the_automatic_path():
    row = agreement_table({**SUMMARY, "path": "automatic"}, None).row(0, named=True)
    assert (row["path"], row["labels"]) == ("automatic", None)
