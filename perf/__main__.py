"""Command line: ``python -m perf`` (see ``python -m perf --help``)."""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from tabulate import tabulate

from .baseline import METRICS
from .isolate import visible_gpus

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_DEVICE_LOST = 0, 1, 2, 3
_STARTED = time.monotonic()  # --time-budget counts from here (imports and start-up included)

DESCRIPTION = """\
Benchmark the nvf_bookend torch.compile backend against eager, inductor and the
untrimmed nvf backend: GPU time, kernel count, host time, compile time, peak memory
and bandwidth vs a copy roofline, per workload.  The model tier (--tag model) times
whole networks as a user sees them: step time with host, host enqueue, kernel time,
nvFuser calls per step, against eager, inductor and both with CUDA graphs, and prints
the acceptance ratios of issue #10.  Prints an environment header and one github
table per metric, and writes every number to a JSON file."""

EPILOG = """\
backends: eager, inductor, nvf_bookend, nvf_untrimmed (= nvf_bookend with
  options={"bookend": False}); inductor_ro (mode="reduce-overhead") with
  --reduce-overhead or when named in --backends.  A run of model workloads only uses
  eager, inductor, inductor_ro, nvf_bookend, nvf_cudagraphs (= nvf_bookend with
  mode="reduce-overhead").

model tier and shards:
  python -m perf --tag model                      # 15 model workloads x 5 backends
  python -m perf --tag model --shard 1/2 --json m1.json   # one call of a run split in two
  python -m perf --tag model --shard 2/2 --json m2.json
  python -m perf --report m1.json m2.json --json model.json --acceptance
  Tables and acceptance ratios of a sharded run come from the joined file only.

the zoo (timm + transformers from perf/zoo_models.txt; --tag zoo, never in a plain run):
  python -m perf --list --tag zoo                  # imports neither library
  python -m perf --tag zoo --shard 1/24 --isolate 480 --time-budget 540 --json z01.json   # 1 GPU
  python -m perf --tag zoo --shard 1/6 --gpus 4 --isolate 480 --time-budget 540 --json z1.json
  python -m perf --report z*.json --json zoo.json --acceptance
  --isolate S: each workload in its own process, killed after S s (a crash or hang is its error);
  --gpus N: N such processes at once, one per GPU.
  --per-gpu K: K processes per GPU; their compiles overlap, their timings take turns.

baseline check (GPU time per call):
  a (workload, backend) regresses when new > baseline * (1 + THRESHOLD).  In a live
  run each suspect is re-measured --remeasure times (fresh compile) and flagged only
  if the best re-measurement still regresses.  A pair that errors now but had a time
  in the baseline is a regression too.
  By default every backend is compared with the same backend of the baseline.
  --compare-backend NEW_B --baseline-backend BASE_B compares only this run's NEW_B
  with the baseline's BASE_B, e.g. check an untrimmed run against a trimmed baseline:
    python -m perf --backends nvf_untrimmed --baseline base.json \\
        --compare-backend nvf_untrimmed --baseline-backend nvf_bookend
  Either flag alone compares that backend with the same name on the other side.
  --compare NEW.json --baseline OLD.json compares two stored files (no GPU, no
  re-measure).

exit status: 0 no regression; 1 regression found (or, with --acceptance, the model
  tier's acceptance not met); 2 usage or environment error
  (bad flag, unknown workload/backend, unreadable file, no CUDA device); 3 the CUDA
  context was lost (a kernel faulted): the run stopped after that pair, kept what it
  measured and printed the command for the rest.

examples:
  python -m perf --list
  python -m perf --quick
  python -m perf --only 'gelu_*' bias_gelu_bwd --backends eager,nvf_bookend
  python -m perf --json out.json --baseline perf/baseline.json --threshold 0.05
  python -m perf --report out.json
  python -m perf --compare new.json --baseline model.json --metric step_ms"""


class UsageError(Exception):
    """Bad flags or inputs: exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m perf",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sel = p.add_argument_group("selection")
    sel.add_argument("--list", action="store_true", help="list workloads and backends, then exit (no GPU needed)")
    sel.add_argument("--quick", action="store_true", help="the quick set (6 seed workloads) with fewer iterations (< 1 min)")
    sel.add_argument("--all", action="store_true", help="every workload, bf16 training blocks included (default set leaves those out)")
    sel.add_argument(
        "--only", nargs="+", action="extend", metavar="NAME", default=[],
        help="workload names or glob patterns (repeatable); overrides the --quick set, keeps its iteration counts",
    )
    sel.add_argument("--tag", action="append", default=[], metavar="TAG",
                     help="keep workloads with this tag (seed, block, bf16, train, ...); model (the model tier), "
                          "llama, gpt, bert, vit, convnext, hf, timm also bring in their non-default workloads")
    sel.add_argument("--backends", metavar="A,B",
                     help="comma-separated backends (default: eager,inductor,nvf_bookend,nvf_untrimmed; "
                          "models only: eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs)")
    sel.add_argument("--reduce-overhead", action="store_true", help="also run inductor_ro (torch.compile mode='reduce-overhead')")
    sel.add_argument("--shard", metavar="I/N",
                     help="run shard I of N of the selection (balanced by cost; join the files with --report)")
    sel.add_argument("--isolate", type=float, metavar="S",
                     help="run each workload in its own process, killed after S seconds; a crash or a timeout "
                          "becomes that workload's error (default 900 with --gpus)")
    sel.add_argument("--gpus", type=int, metavar="N",
                     help="with --isolate: N workload processes at once, one per GPU (CUDA_VISIBLE_DEVICES)")
    sel.add_argument("--per-gpu", type=int, metavar="K",
                     help="with --isolate: K workload processes per GPU; compiles overlap, timings take turns")

    m = p.add_argument_group("measurement")
    m.add_argument("--iters", type=int, metavar="N", help="timed calls for GPU time (default 50, quick 20)")
    m.add_argument("--warmup", type=int, metavar="N", help="calls after the first before timing (default 10, quick 3)")
    m.add_argument("--profile-iters", type=int, metavar="N", help="calls under torch.profiler (default 5, quick 3)")
    m.add_argument("--host-iters", type=int, metavar="N", help="tiny-input calls timed for host time (default 300, quick 60)")
    m.add_argument("--no-host", action="store_true", help="skip host time (saves the second, tiny-shape compile)")
    m.add_argument("--no-profile", action="store_true", help="skip torch.profiler kernel counts")
    m.add_argument("--no-l2-flush", action="store_true", help="do not flush the L2 cache before each timed call")
    m.add_argument(
        "--with-launch-gaps", action="store_true",
        help="do not hide host time behind a GPU spin before each timed call (GPU time then includes launch gaps)",
    )
    m.add_argument("--time-budget", type=float, metavar="S",
                   help="start a workload only if it is predicted to finish within S seconds of the start "
                        "(those not run are listed, with the command that measures them); with --json the "
                        "file is also rewritten after every pair, so a killed run keeps what it measured")

    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="result file (default perf/results/perf-<UTC time>.json)")
    o.add_argument("--report", metavar="FILE", nargs="+",
                   help="print the tables of a stored result file, then exit (no GPU needed); several files "
                        "(the shards of one run) are joined first, and --json writes the joined file")
    o.add_argument("--acceptance", action="store_true",
                   help="exit 1 unless every acceptance criterion of the model tier passes (run or --report)")

    b = p.add_argument_group("baseline")
    b.add_argument("--baseline", metavar="FILE", nargs="+",
                   help="stored result file(s) (shards are joined) to check this run (or --compare) against")
    b.add_argument("--threshold", type=float, default=None, metavar="F",
                   help="allowed growth, fraction (default per metric: 0.10; host_us and enqueue_ms 0.25)")
    b.add_argument("--compare", metavar="NEW", nargs="+",
                   help="compare stored result file(s) NEW with --baseline, no measuring (no GPU needed)")
    b.add_argument("--compare-backend", metavar="NAME", help="backend of the new results to check (default: all shared backends)")
    b.add_argument("--baseline-backend", metavar="NAME", help="backend of the baseline to check against (default: same name)")
    b.add_argument("--min-delta-us", type=float, default=None, metavar="US",
                   help="time changes smaller than this are never flagged (default per metric: gpu_us 1, host_us 2, "
                        "step_ms and enqueue_ms 20 us)")
    b.add_argument("--metric", default="gpu_us", choices=tuple(METRICS),
                   help="number compared with the baseline (default gpu_us; only gpu_us and step_ms are re-measured)")
    b.add_argument("--remeasure", type=int, default=None, metavar="N", help="re-measurements of a suspect before flagging (default 3, quick 2; 0: none)")
    return p


# ----------------------------------------------------------------------------- modes


def _resolve_backends(args: argparse.Namespace, workloads: Sequence = ()) -> list[str]:
    from .backends import BACKENDS, default_backends

    models = [w for w in workloads if w.timing != "gpu"]
    default = default_backends(bool(models), mixed=len(models) < len(workloads))
    names = [n.strip() for n in args.backends.split(",") if n.strip()] if args.backends else default
    if args.reduce_overhead and "inductor_ro" not in names:
        names.append("inductor_ro")
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise UsageError(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}")
    if not names:
        raise UsageError("--backends is empty")
    return list(dict.fromkeys(names))


def _select(args: argparse.Namespace):
    from .workloads import select

    try:
        wls = select(only=args.only, tags=args.tag, quick=args.quick, all_=args.all)
    except KeyError as exc:
        _zoo_note(args)
        raise UsageError(str(exc.args[0])) from None
    if not wls:
        _zoo_note(args)
        raise UsageError("no workload selected")
    return wls


def list_mode(args: argparse.Namespace) -> int:
    from .backends import BACKENDS

    _zoo_note(args)
    rows = []
    for w in _shard(args, _select(args)):
        meta = w.meta()
        sets = ",".join([s for s, on in (("default", w.default), ("quick", w.quick)) if on]
                        + [f"--tag {t}" for t in sorted(w.opt_in_tags)]) or "all"
        rows.append([w.name, meta["kind"], meta["dtype"], ",".join(meta["tags"]), sets, meta["description"]])
    print(tabulate(rows, headers=["workload", "kind", "dtype", "tags", "in sets", "description"], tablefmt="github"))
    print()
    print(tabulate([[b.name, b.description] for b in BACKENDS.values()], headers=["backend", "description"], tablefmt="github"))
    return EXIT_OK


def _zoo_note(args: argparse.Namespace) -> None:
    """Says which zoo suites are not registered because their library is not installed."""
    if "zoo" not in args.tag and not any("zoo" in o for o in args.only):
        return
    from .zoo import missing_libraries

    for lib in missing_libraries():
        _stderr(f"perf: {lib} is not installed: its zoo models are not registered (pip install {lib})")


def _shard(args: argparse.Namespace, workloads: list) -> list:
    from .workloads import parse_shard, shard

    if not args.shard:
        return workloads
    try:
        i, n = parse_shard(args.shard)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    chosen = shard(workloads, i, n)
    if not chosen:
        raise UsageError(f"shard {i}/{n} of {len(workloads)} workload(s) is empty")
    return chosen


def _load(paths: "str | Sequence[str]"):
    """One document; several files are joined (the shards of one run)."""
    from .report import join_documents, load_document

    paths = [paths] if isinstance(paths, str) else list(paths)
    try:
        return join_documents([load_document(p) for p in paths], paths)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _pairs(new_backends: Sequence[str], base: dict, args: argparse.Namespace) -> list[tuple[str, str]]:
    from .baseline import backend_pairs
    from .report import backends_of

    try:
        return backend_pairs(new_backends, backends_of(base), args.compare_backend, args.baseline_backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def compare_mode(args: argparse.Namespace) -> int:
    from .baseline import compare, render_comparison
    from .report import backends_of

    if not args.baseline:
        raise UsageError("--compare needs --baseline FILE")
    new, base = _load(args.compare), _load(args.baseline)
    cmp = compare(new, base, threshold=args.threshold, pairs=_pairs(backends_of(new), base, args), metric=args.metric,
                  min_delta_us=args.min_delta_us)
    print(render_comparison(cmp))
    return cmp.exit_code


def _acceptance_code(doc: dict, args: argparse.Namespace) -> int:
    from .acceptance import evaluate, passed
    from .zoo_report import zoo_passed, zoo_workloads

    if not args.acceptance:
        return EXIT_OK
    zoo = bool(zoo_workloads(doc))
    ok = (not evaluate(doc) or passed(doc)) and (not zoo or zoo_passed(doc)) and (zoo or passed(doc))
    if ok:
        return EXIT_OK
    _stderr("perf: the acceptance is not met (see the Acceptance tables)")
    return EXIT_REGRESSION


def report_mode(args: argparse.Namespace) -> int:
    from .report import render_report, write_document

    doc = _load(args.report)
    print(render_report(doc), end="")
    if args.json:
        print(f"joined document written to {write_document(doc, args.json)}")
    return _acceptance_code(doc, args)


def _default_json_path() -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(__file__).resolve().parent / "results" / f"perf-{stamp}.json"


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_mode(args: argparse.Namespace) -> int:
    selected = _select(args)
    workloads = _shard(args, selected)
    backends = _resolve_backends(args, selected)
    base = _load(args.baseline) if args.baseline else None
    pairs = _pairs(backends, base, args) if base is not None else None

    if args.isolate or args.gpus or args.per_gpu:
        return isolated_mode(args, selected, workloads, backends, base, pairs)

    import torch

    if not torch.cuda.is_available():
        _stderr(
            "perf: no CUDA device: the benchmarks need a GPU.  Without one, use --list, "
            "--report FILE or --compare NEW --baseline OLD."
        )
        return EXIT_USAGE

    from .baseline import compare, render_comparison
    from .env import collect_env, format_env
    from .measure import DEFAULT_CONFIG, QUICK_CONFIG, Runner, with_overrides
    from .report import make_document, render_report, write_document
    from .workloads import parse_shard

    cfg = with_overrides(
        QUICK_CONFIG if args.quick else DEFAULT_CONFIG,
        iters=args.iters,
        warmup=args.warmup,
        profile_iters=args.profile_iters,
        host_iters=args.host_iters,
        remeasure_repeats=args.remeasure,
    )
    cfg = with_overrides(
        cfg,
        host=False if args.no_host else None,
        profile=False if args.no_profile else None,
        flush_l2=False if args.no_l2_flush else None,
        hide_host=False if args.with_launch_gaps else None,
    )

    env = collect_env()
    print(format_env(env) + "\n", flush=True)
    if any(b.startswith("nvf") for b in backends) and (env.get("dynamo_nvf") is None or str(env["dynamo_nvf"]).startswith("import failed")):
        _stderr("perf: warning: dynamo_nvf is not importable; the nvf_* columns will hold errors")
    _stderr(f"perf: {len(workloads)} workload(s) x {len(backends)} backend(s): {', '.join(backends)}")

    runner = Runner(cfg, progress=_stderr)
    env["TEARDOWN_CUPTI"] = os.environ.get("TEARDOWN_CUPTI")
    if any(w.timing == "gpu" for w in workloads):
        runner.measure_roofline()
    config = {
        "measure": cfg.to_json(),
        "quick": args.quick,
        "all": args.all,
        "only": args.only,
        "tags": args.tag,
        "backends": backends,
        "shard": list(parse_shard(args.shard)) if args.shard else None,
        "run_workloads": [w.name for w in selected],
        "time_budget_s": args.time_budget,
    }
    path = Path(args.json) if args.json else _default_json_path()

    def document(results: dict) -> dict:
        return make_document(env=env, config=config, backends=backends, workloads={w.name: w.meta() for w in selected},
                             results=results, roofline=runner.roofline, host_floor=runner.host_floor)

    def checkpoint(results: dict) -> None:
        if args.json:
            partial = document(results)
            partial["partial"] = True
            write_document(partial, path)

    deadline = _STARTED + args.time_budget if args.time_budget else None
    results = runner.run(workloads, backends, on_pair=checkpoint, deadline=deadline)
    doc = document(results)
    if runner.device_lost:
        doc["device_lost"] = runner.device_lost
    print(render_report(doc, with_env=False), flush=True)

    code = EXIT_OK
    if runner.device_lost:
        # Every later CUDA call of this process fails: no comparison, no re-measurement.
        path = write_document(doc, path)
        done = {(w, b) for w, row in results.items() for b in row}
        rest = [w.name for w in workloads if any((w.name, b) not in done for b in backends)]
        _stderr(
            f"perf: the CUDA context was lost in {runner.device_lost} (its record has the error); results so far "
            f"written to {path}.  The rest, in a fresh process:\n"
            f"  python -m perf --only {','.join(rest)} --backends {','.join(backends)} --json REST.json"
        )
        return EXIT_DEVICE_LOST
    if base is not None:
        repeats = cfg.remeasure_repeats
        cmp = compare(
            doc,
            base,
            threshold=args.threshold,
            pairs=pairs,
            remeasure=(lambda w, b, n: runner.remeasure(w, b, n, metric=args.metric)) if repeats > 0 else None,
            repeats=max(1, repeats),
            metric=args.metric,
            min_delta_us=args.min_delta_us,
        )
        print(render_comparison(cmp), flush=True)
        doc["comparison"] = cmp.to_json()
        code = cmp.exit_code

    path = write_document(doc, path)
    print(f"results written to {path}")
    not_run = [w.name for w in workloads if w.name not in results]
    if not_run:
        _stderr(
            f"perf: {len(not_run)} workload(s) not run within --time-budget; measure them in another call and join:\n"
            f"  python -m perf --only {','.join(not_run)} --backends {','.join(backends)} --json REST.json\n"
            f"  python -m perf --report {path} REST.json [other shards] --json joined.json"
        )
    return code or _acceptance_code(doc, args)


def isolated_mode(args: argparse.Namespace, selected: list, workloads: list, backends: list[str], base, pairs) -> int:
    """--isolate / --gpus: one process per workload (perf/isolate.py), the files joined into one."""
    from .baseline import compare, render_comparison
    from .isolate import DEFAULT_TIMEOUT_S, kill_children_on_sigterm, run_isolated
    from .report import render_report, write_document
    from .workloads import parse_shard

    path = Path(args.json) if args.json else _default_json_path()
    config = {"quick": args.quick, "all": args.all, "only": args.only, "tags": args.tag, "backends": backends,
              "shard": list(parse_shard(args.shard)) if args.shard else None,
              "run_workloads": [w.name for w in selected], "time_budget_s": args.time_budget,
              "isolate_s": args.isolate or DEFAULT_TIMEOUT_S, "gpus": args.gpus or 1, "per_gpu": args.per_gpu or 1}
    _stderr(f"perf: {len(workloads)} workload(s) x {len(backends)} backend(s), one process each"
            f"{f', {args.gpus} at a time (one per GPU)' if args.gpus and args.gpus > 1 else ''}"
            f"{f', {args.per_gpu} per GPU' if args.per_gpu and args.per_gpu > 1 else ''}")

    def checkpoint(doc: dict) -> None:
        if args.json:
            doc["partial"] = True
            write_document(doc, path)

    deadline = _STARTED + args.time_budget if args.time_budget else None
    kill_children_on_sigterm()
    doc = run_isolated(args, workloads, backends, config, timeout_s=args.isolate or DEFAULT_TIMEOUT_S, gpus=args.gpus or 1,
                       per_gpu=args.per_gpu or 1, deadline=deadline, progress=_stderr, on_update=checkpoint)
    # the children's measurement settings (all equal: the same flags)
    print(render_report(doc), flush=True)
    code = EXIT_OK
    if base is not None:
        cmp = compare(doc, base, threshold=args.threshold, pairs=pairs, metric=args.metric, min_delta_us=args.min_delta_us)
        print(render_comparison(cmp), flush=True)
        doc["comparison"] = cmp.to_json()
        code = cmp.exit_code
    path = write_document(doc, path)
    print(f"results written to {path}")
    not_run = [w.name for w in workloads if w.name not in doc["results"]]
    if not_run:
        _stderr(f"perf: {len(not_run)} workload(s) not started within --time-budget; measure them in another call:\n"
                f"  python -m perf --only {','.join(not_run)} --backends {','.join(backends)} "
                f"--isolate {args.isolate or DEFAULT_TIMEOUT_S:g} --json REST.json")
    return code or _acceptance_code(doc, args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status (argparse itself exits 2 on bad flags)."""
    args = build_parser().parse_args(argv)
    try:
        if args.threshold is not None and args.threshold < 0:
            raise UsageError("--threshold must be >= 0")
        if args.time_budget is not None and args.time_budget <= 0:
            raise UsageError("--time-budget must be > 0")
        if args.acceptance and args.shard:
            raise UsageError("--acceptance needs the whole run: join the shards with --report A.json B.json --acceptance")
        for flag in ("iters", "warmup", "profile_iters", "host_iters"):
            val = getattr(args, flag)
            if val is not None and val < (0 if flag == "warmup" else 1):
                raise UsageError(f"--{flag.replace('_', '-')} is too small: {val}")
        if args.isolate is not None and args.isolate <= 0:
            raise UsageError("--isolate must be > 0 seconds")
        if args.gpus is not None and args.gpus < 1:
            raise UsageError("--gpus must be >= 1")
        visible = visible_gpus(dict(os.environ))
        if args.gpus is not None and args.gpus > 1 and visible is not None and args.gpus > len(visible):
            raise UsageError(f"--gpus {args.gpus}: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} "
                             f"lists {len(visible)}")
        if args.per_gpu is not None and args.per_gpu < 1:
            raise UsageError("--per-gpu must be >= 1")
        if args.remeasure is not None and args.remeasure < 0:
            raise UsageError("--remeasure must be >= 0")
        if args.list:
            return list_mode(args)
        if args.report:
            return report_mode(args)
        if args.compare:
            return compare_mode(args)
        return run_mode(args)
    except UsageError as exc:
        _stderr(f"perf: error: {exc}")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
