"""`sql:` in params.yaml: the bounds on one `clarify sql` query, so no query can take the machine's memory, cores
or time (each is overridable per call: --timeout, --memory-limit, --threads)."""

from pydantic import Field

from dagster_project.config.base import Strict

# DuckDB's memory_limit syntax: a number and a unit, e.g. 2GB, 512MiB, 1.5GB
MEMORY_SIZE = r"^\d+(\.\d+)?\s*([KMGT]i?B|B)$"


class SqlConfig(Strict):
    timeout_s: float = Field(60.0, gt=0)
    memory_limit: str = Field("2GB", pattern=MEMORY_SIZE)
    threads: int = Field(2, ge=1)
