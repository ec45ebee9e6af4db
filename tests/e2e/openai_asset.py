"""A small LLM asset for the real-server tests (test_openai_real.py): n yes/no questions, one JSON reply each.

It goes through everything a project asset does: LLMResource -> LLMClient (cache) -> the role's backend,
status/raw_output/error/model/prompt_version per row, Dagster usage metadata, the Parquet IO manager with
DuckDB views, and a Great Expectations asset check with the project's error-rate expectation.
Questions whose text contains POISON are the ones a FaultProxy always fails.

Run as a script (the kill -9 test does): python openai_asset.py PARAMS N POISON_EVERY [SUITES_DIR]
It materializes llmfaults/answers in the current folder and prints one JSON line with the run's metadata.
"""

import json
import sys
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_project.llm.chat import ChatRequest
from dagster_project.llm.task import parse_json_object
from dagster_project.defs.quality.checks import build_checks
from dagster_project.config import load_params
from dagster_project.lib.resources import LLMResource
from dagster_project.lib.io_manager import WarehouseIOManager

GROUP, ASSET = "llmfaults", "answers"
POISON = "poison-pill"
PROMPT_VERSION = "llmfaults@1"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
          "required": ["answer"]}
THINGS = ("an apple", "a carrot", "a salmon", "a tulip", "a granite", "a sparrow", "an oak", "a banana",
          "a shark", "a potato", "a rose", "a pebble", "a lemon", "a whale", "a pine", "a cherry")
SUITE = """\
asset: llmfaults/answers
blocking: true
description: Answers are yes/no and the LLM error rate stays within quality.max_error_rate.
expectations:
  - type: expect_column_values_to_be_unique
    kwargs: {column: qid}
  - type: expect_column_values_to_be_in_set
    kwargs: {column: status, value_set: [ok, parse_error, llm_error]}
  - name: LLM error rate within quality.max_error_rate
    query: select avg(case when status = 'llm_error' then 1.0 else 0.0 end) as error_rate from t
    type: expect_column_max_to_be_between
    kwargs: {column: error_rate, max_value: "${quality.max_error_rate}"}
"""


def questions(n: int, poison_every: int = 0) -> list[str]:
    out = []
    for i in range(n):
        # the shared prefix first: llama.cpp's server reuses the cached prompt prefix of the previous request
        q = f"Reply in JSON with answer yes or no. Is {THINGS[i % len(THINGS)]} a fruit? (question {i})"
        if poison_every and i % poison_every == poison_every - 1:
            q = f"{q} [{POISON}]"
        out.append(q)
    return out


def write_suite(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{GROUP}.{ASSET}.yaml").write_text(SUITE)
    return folder


def build_defs(params_path: str, n: int, poison_every: int, suites_dir: Path, llm: LLMResource | None = None,
               role: str = "assistant") -> dg.Definitions:
    params = load_params(params_path)
    @dg.asset(key_prefix=GROUP, group_name=GROUP, name=ASSET, kinds={"polars"})
    def answers(context: dg.AssetExecutionContext, llm: dg.ResourceParam[LLMResource]) -> pl.DataFrame:
        qs = questions(n, poison_every)
        reqs = [ChatRequest.of([{"role": "user", "content": q}], PROMPT_VERSION, SCHEMA,
                               temperature=0.0, max_tokens=10) for q in qs]
        chat = llm.session(context)
        results = chat(role, reqs)
        rows = []
        for i, (q, r) in enumerate(zip(qs, results)):
            obj, why, _ = parse_json_object(r.text) if r.ok else (None, None, False)
            answer = obj.get("answer") if obj else None
            status = "llm_error" if not r.ok else ("ok" if answer in ("yes", "no") else "parse_error")
            rows.append({"qid": i, "question": q, "answer": answer, "status": status, "raw_output": r.text,
                         "error": r.error or (why if status == "parse_error" else None), "model": r.model,
                         "prompt_version": PROMPT_VERSION, "cached": r.cached})
        context.add_output_metadata(chat.usage())
        return pl.DataFrame(rows, schema_overrides={"answer": pl.Utf8, "error": pl.Utf8})

    return dg.Definitions(
        assets=[answers], asset_checks=build_checks({dg.AssetKey([GROUP, ASSET])}, write_suite(suites_dir)),
        executor=dg.in_process_executor,
        resources={"io_manager": WarehouseIOManager(), "params": params,
                   "llm": llm or LLMResource(params.llm)})


def materialize(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, raise_on_error=False)


def run_summary(result: dg.ExecuteInProcessResult) -> dict:
    """The materialization's metadata (plain values) and the check outcome."""
    meta: dict = {}
    for ev in result.get_asset_materialization_events():
        for k, v in ev.step_materialization_data.materialization.metadata.items():
            if k != "dagster/column_schema":  # a TableSchema record is no plain value (names and types only)
                meta[k] = getattr(v, "value", v)
    checks = result.get_asset_check_evaluations()
    return {"success": result.success, "metadata": meta, "checks_passed": [c.passed for c in checks]}


if __name__ == "__main__":
    params, n, poison = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    suites = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("suites")
    with dg.DagsterInstance.ephemeral() as inst:
        res = materialize(build_defs(params, n, poison, suites), inst)
        print("RUN_JSON " + json.dumps(run_summary(res), default=str), flush=True)
    sys.exit(0 if res.success else 1)
