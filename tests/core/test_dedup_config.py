"""The shared dedup search params (config/dedup.py): one definition in benchmark, questions and facets."""

import pytest

from dagster_project.config import ParamsError, parse_params
from dagster_project.config.dedup import DedupSearch
from dagster_project.core.shared.dedup import DEFAULT_ANN, AnnSearch, ann_search

SECTIONS = ("benchmark", "questions", "facets")


@pytest.mark.parametrize("section", SECTIONS)
def test_section_shares_the_search_fields_and_maps_them_to_ann(section):
    p = parse_params({section: {"dedup_exact_max": 0, "dedup_ann_k": 4, "dedup_ann_nprobe": 32}})
    cfg = getattr(p, section)
    assert isinstance(cfg, DedupSearch)
    assert ann_search(cfg) == AnnSearch(exact_max=0, k=4, nprobe=32)
    assert ann_search(getattr(parse_params({}), section)) == DEFAULT_ANN  # the config defaults are the core defaults


@pytest.mark.parametrize(("key", "value"), [("dedup_exact_max", -1), ("dedup_ann_k", 0), ("dedup_ann_nprobe", 0),
                                            ("dedup_ann_k", "8")])
def test_bad_search_values_name_the_key(key, value):
    for section in SECTIONS:
        with pytest.raises(ParamsError, match=rf"{section}\.{key}"):
            parse_params({section: {key: value}})
