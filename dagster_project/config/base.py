"""The base of every params.yaml section: unknown keys are errors, values are typed strictly, nothing mutates."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
