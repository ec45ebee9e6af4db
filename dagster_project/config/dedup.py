"""The semantic-dedup search knobs, one definition shared by `benchmark`, `questions` and `facets`."""

from __future__ import annotations

from pydantic import Field

from dagster_project.config.base import Strict

class DedupSearch(Strict):
    """How pairs above `dedup_tau` (set per section) are found: exact up to dedup_exact_max, faiss IVF above."""

    dedup_block: int = Field(2048, gt=0)  # rows per block of the exact all-pairs search
    dedup_exact_max: int = Field(50_000, ge=0)  # up to this many unique texts the exact search runs (O(n^2))
    dedup_ann_k: int = Field(16, gt=0)  # neighbours per row in the approximate search (widened for bigger groups)
    dedup_ann_nprobe: int = Field(16, gt=0)  # IVF cells searched per row: more finds more pairs, linearly slower
