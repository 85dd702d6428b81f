"""`pgrpo sweep`: arms × seeds, one `pgrpo fit` process per cell, resumable.

Layout: <logs>/<sweep>/<arm>/seed<k>/ holds one cell's TensorBoard events,
config.yaml, checkpoints/, fit.log (its output) and cell.json (its arguments,
status, time, the machines that ran it and the code each part of it ran).
`pgrpo report <logs>/<sweep>` reads this layout back.

With --results, each finished cell is also kept in <results>/<sweep>/<arm>/seed<k>/: its cell.json, config.yaml,
base.json, basis.json, code.json, end_eval.json, fit.log and scalars (scalars.json.gz, in place of the event files),
about 70 KB, and its last.ckpt while a later stage of the plan is to go on from it, to be committed as cells land;
the V it took from the cache is kept once, by its digest, in <results>/bases/ (keep_v_file). A sweep that takes
several sessions of a machine whose logs do not outlive it then resumes from a fresh clone, and
`pgrpo report <results>/<sweep>` reads it as it reads logs. A cell trained on another base or V than the cells kept
before it is not kept (OtherBase, OtherV), and no further cell starts.

A finished sweep is lengthened by rerunning it with a larger --trainer.max_steps=N: each cell resumes from
its last checkpoint. Nothing in a run depends on max_steps but where it stops (the warmup counts from step
0, step s's prompts depend on s and the seed alone, and the RNG state travels in the checkpoint), so 100
steps and then 200 more are the run of 300; `pgrpo report --steps 100` still reads the first 100.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pgrpo.directions.basis import KEPT_PREFIX
from pgrpo.records.cache import announce, cache_dir
from pgrpo.evaluation.end_eval import FILE as END_EVAL_FILE
from pgrpo.evaluation.end_eval import evaluated_at
from pgrpo.records.events import (BASE_FILE, BASIS_FILE, CODE_FILE, KEPT_SCALARS, POOL_FILE, Scalars, keep_scalars,
                          load_base, load_basis, load_code, load_config, read_scalars, setting)
from pgrpo.directions.extraction import HackBasis
from pgrpo.model.load import cached_digest, merges_published_update, model_id, same_base
from pgrpo.records.provenance import NOT_CODE, REPOSITORY, code_record
from pgrpo.model.substrate import cpu_kind, machine

CELL_FILE = "cell.json"
LAST = Path("checkpoints") / "last.ckpt"
KEPT_CHECKPOINT = "last.ckpt"  # in a kept cell a later stage goes on from
MAX_STEPS = "--trainer.max_steps="
DEFAULT_SEEDS = [0, 1, 2]
# A V larger than this is not kept in <results>/bases/: the repository's tree travels to a GPU machine within 64 MiB.
# The embedded default's is 55 KB; the primed SmolLM2's, about 1.6 MB, is extracted again where the plan resumes
# (at the thread count and on a machine of the kind its cells' basis.json name), and its digest checked.
KEPT_V_MAX_BYTES = 256 * 1024


@dataclass
class Stage:
    """One stage of a sweep plan: these arms at the plan's seeds (or its own), with these extra fit arguments."""

    arms: list[str]
    """configs, as in --arms; an arm an earlier stage ran is lengthened here with a larger --trainer.max_steps=N."""
    overrides: list[str] = field(default_factory=list)
    """`pgrpo fit` arguments for this stage's cells, after the sweep's own --overrides."""
    seeds: list[int] | None = None
    """this stage's seeds, in place of the plan's: a bench whose time may run out runs every arm at one seed
    before any at the next, a stage each."""

    def seeds_in(self, plan_seeds: list[int]) -> list[int]:
        """The seeds this stage runs its arms at."""
        return plan_seeds if self.seeds is None else self.seeds

    def max_steps(self) -> int | None:
        """The steps this stage runs its cells to, where its overrides say (else the sweep's or the configs')."""
        asked = asked_max_steps(self.overrides)
        return int(asked) if asked is not None else None


def asked_max_steps(args: list[str]) -> str | None:
    """The value of the last --trainer.max_steps=N among `pgrpo fit` arguments (None if none gives it)."""
    asked = [a[len(MAX_STEPS):] for a in args if a.startswith(MAX_STEPS)]
    return asked[-1] if asked else None


def stages_of(arms: list[str], stages: list[Stage]) -> list[Stage]:
    """A sweep's stages in the order they run: --arms (if any) first, then --stages."""
    return ([Stage(list(arms))] if arms else []) + [Stage(list(s.arms), list(s.overrides), s.seeds) for s in stages]


def read_plan(path: str) -> tuple[list[int], list[Stage]]:
    """A plan file's seeds and stages, read as `pgrpo sweep --config PATH` reads it (an unknown key is refused)."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(sweep)
    parser.add_argument("--config", action=ActionConfigFile)
    try:
        plan = parser.instantiate(parser.parse_args(["--config", path]))
    except Exception as err:  # jsonargparse says which key or value, and of what file
        raise SystemExit(f"{path}: not a sweep plan ({err})") from err
    return plan.seeds, stages_of(plan.arms, plan.stages)


def sweep(
    name: str,
    arms: list[str] = [],
    seeds: list[int] = DEFAULT_SEEDS,
    overrides: list[str] = [],
    stages: list[Stage] = [],
    workers: int = 1,
    threads: int | None = None,
    logs: str = "logs",
    configs: str = "configs",
    results: str | None = None,
    protocol: str | None = None,
) -> None:
    """Run arms x seeds, each cell in its own `pgrpo fit` process; rerun to resume.

    Resuming: finished cells are skipped, a cell that was killed or crashed resumes from its last
    checkpoint (bit-exact) or restarts when it never wrote one. A crashed cell does not stop the
    others; the sweep exits non-zero at the end if any cell failed. Then `pgrpo report <logs>/<name>`.

    A plan is a sweep written to a file and run with `pgrpo sweep --config PLAN.yaml`: its name, seeds,
    overrides and stages. Stages run in order, each once the one before has finished (a later stage may
    lengthen an earlier stage's cells to more steps); a rerun of the plan skips what every stage finished.

    Args:
        name: the sweep: cell (arm, k) logs to <logs>/<name>/<arm>/seed<k>/ (events, checkpoints, fit.log).
        arms: configs (erase = <configs>/erase.yaml; random_v = the one random_v.yaml in a folder of <configs>,
            configs/placebos/; placebos/random_v by its folder; or a .yaml path), or several joined by "+" and
            applied in order (vanilla+no_teacher: the overlay on vanilla), e.g. [vanilla, erase, random_v]; the
            first stage, before any of --stages. A cell is named by its configs' file names (vanilla+no_teacher).
            A placebo yoked to its method, step by step, is `<placebo>@<method>` (random_v@erase+no_teacher: the
            placebo random_v+no_teacher yoked to erase+no_teacher's run at its seed, pgrpo/interventions/yoke.py):
            its cells run after every other cell of their stage, and only once their method's has finished.
        seeds: seeds every arm runs at, unless a stage gives its own (cell k gets --seed_everything k and
            --data.seed k).
        overrides: extra `pgrpo fit` arguments for every cell, e.g. [--trainer.max_steps=20]; a finished
            sweep rerun with another --trainer.max_steps=N and nothing else changed goes on to step N.
        stages: further stages, each {arms, overrides, seeds}, run in order after --arms.
        workers: cells run at once (each its own process; on a machine of C cores give each C/workers
            threads: --threads 1 with 2 workers on 2 cores).
        threads: each cell's torch threads (OMP_NUM_THREADS; default: as the environment has it). A run's last
            bits depend on its thread count, so a plan that is to be rerun bit for bit states it.
        logs: root log directory.
        configs: directory the arm names are looked up in (and in its folders).
        results: where each finished cell is kept, to be committed: <results>/<name>/<arm>/seed<k>/ (its record,
            config, base, V's record, code, end-of-run evaluation, output and scalars; its last checkpoint only while
            a later stage is to go on from it), and the V it took from the cache once in <results>/bases/. A cell
            kept there with the same arguments is skipped, so a rerun from a fresh clone goes on where the committed
            results stop.
        protocol: the protocol the plan runs under, e.g. docs/bench/protocol-2.md: it makes the plan confirmatory,
            and a confirmatory plan runs committed code only (its cells' numbers are then what the commit computes,
            which each cell records in code.json and cell.json): the sweep refuses to start from a checkout with
            uncommitted changes (results/ aside: the cells it keeps land there before they are committed), naming
            them.
    """
    if workers < 1 or (threads is not None and threads < 1):
        raise SystemExit(f"--workers {workers} --threads {threads}: each must be at least 1")
    root = Path(logs) / name
    kept_root = Path(results) / name if results else None
    plan = stages_of(arms, stages)
    if not any(stage.arms for stage in plan):
        raise SystemExit("pgrpo sweep: no arms (give --arms, or --stages in a plan)")
    # every cell's arguments first, so a misspelt arm fails before hours of the others have run
    stage_cells = cells_of(plan, seeds, root, Path(configs), overrides, kept_root)
    planned = arguments_by_cell(stage_cells, root)
    refuse_unplanned_methods(stage_cells, root, kept_root or root)
    for cell, argvs in planned.items():
        refuse_other_arguments(cell, argvs)
        if kept_root:
            refuse_other_arguments(kept_root / cell.relative_to(root), argvs, kept=True)
    if kept_root:
        refuse_another_cached_base(kept_root)
    if protocol:
        refuse_uncommitted_code(protocol)
    total = sum(len(cells) for cells in stage_cells)
    failed, done = [], iter(range(1, total + 1))
    lock = threading.Lock()

    other_base = threading.Event()  # a cell trained on another base or V than the kept ones: start no more cells

    def one(cell_args: tuple[str, int, list[str]]) -> None:
        arm, seed, argv = cell_args
        cell = root / arm / f"seed{seed}"
        later = planned[cell][planned[cell].index(argv) + 1:]
        method = yoked_method(arm)
        if other_base.is_set():
            ok, status = False, "not run (a cell above trained on another base or V than the kept cells)"
        elif method is not None and not finished(method_run(method, seed, kept_root or root)):
            ok, status = False, (f"FAILED: not run, its method's run {method_run(method, seed, kept_root or root)} "
                                 f"did not finish (a yoked placebo reads it step by step)")
        else:
            try:
                kept = kept_root / arm / f"seed{seed}" if kept_root else None
                ok, status = run_cell(cell, argv, later, threads, kept)
            except OtherBase as err:
                other_base.set()
                shutil.rmtree(cell)  # its numbers are of another model or V: a rerun on the kept ones runs it again
                ok, status = False, f"FAILED: {err}"
            except Exception as err:  # e.g. a finished cell that could not be kept (disk full): the others go on
                ok, status = False, f"FAILED: {err!r} (a rerun keeps or runs it again)"
        with lock:  # one whole line per cell, in the order cells finish
            print(f"[{next(done)}/{total}] {arm} seed{seed}: {status}", flush=True)
            if not ok:
                failed.append(f"{arm} seed{seed}")

    for cells in stage_cells:
        with ThreadPoolExecutor(max_workers=workers) as pool:  # a stage ends before the next begins
            list(pool.map(one, cells))
    print(f"report: pgrpo report {root}")
    if failed:
        sys.exit(f"{len(failed)} of {total} cells failed: {', '.join(failed)} (see their fit.log; rerun to resume)")


def cells_of(plan: list[Stage], seeds: list[int], root: Path, configs: Path, overrides: list[str],
             method_runs: Path | None = None) -> list[list[tuple[str, int, list[str]]]]:
    """Each stage's cells in the order they run, (arm's directory, seed, its `pgrpo fit` arguments), in batches that
    run one after the other: a stage's yoked placebos after its other cells, which hold their methods.
    `method_runs`: where a yoked placebo reads its method's runs (the results store, else `root`)."""
    batches = []
    for stage in plan:
        cells = [(arm_name(arm), seed, fit_args(arm, seed, root, configs, overrides + stage.overrides, method_runs))
                 for arm in stage.arms for seed in stage.seeds_in(seeds)]
        for yoked in (False, True):
            batch = [cell for cell in cells if (yoked_method(cell[0]) is not None) == yoked]
            batches += [batch] if batch else []
    return batches


def yoked_method(arm: str) -> str | None:
    """The method a yoked placebo's arm names after "@" in its first part, with the placebo's overlays
    (random_v@erase+no_teacher: erase+no_teacher); None for any other arm."""
    first, *overlays = arm.split("+")
    _, at, method = first.partition("@")
    return "+".join([method, *overlays]) if at else None


def method_run(method: str, seed: int, runs: Path) -> Path:
    """Where a yoked placebo at `seed` reads its method's run: its cell in `runs` (<results or logs>/<sweep>)."""
    return runs / arm_name(method) / f"seed{seed}"


def finished(cell: Path) -> bool:
    record = read_record(cell)
    return bool(record) and record["status"] == "done"


def refuse_unplanned_methods(stage_cells: list[list[tuple[str, int, list[str]]]], root: Path, runs: Path) -> None:
    """Before any cell runs: a yoked placebo's method must be a cell of the plan at the same seed, in its stage or
    an earlier one, or have finished in `runs` already; else the error names the run it would read."""
    planned: set[tuple[str, int]] = set()
    for cells in stage_cells:
        for arm, seed, _ in cells:
            method = yoked_method(arm)
            path = method_run(method, seed, runs) if method is not None else None
            if method is not None and (arm_name(method), seed) not in planned and not finished(path):
                raise SystemExit(f"arm {arm!r} at seed {seed} is yoked to its method's run {path}, which no stage "
                                 f"before it runs and which has not finished: add {method!r} to an earlier stage (or "
                                 f"to this one) at seed {seed}")
        planned |= {(arm, seed) for arm, seed, _ in cells}


def arguments_by_cell(stage_cells: list[list[tuple[str, int, list[str]]]], root: Path) -> dict[Path, list[list[str]]]:
    """Each cell's directory under `root` (<logs>/<sweep>) and its arguments, stage by stage."""
    planned: dict[Path, list[list[str]]] = {}
    for arm, seed, argv in (cell for cells in stage_cells for cell in cells):
        planned.setdefault(root / arm / f"seed{seed}", []).append(argv)
    return planned


def arm_name(arm: str) -> str:
    """The arm's directory: config stems joined by "+" (configs/erase.yaml+no_teacher -> erase+no_teacher), a yoked
    placebo's method kept after its "@" (random_v@erase)."""
    first, *overlays = arm.split("+")
    placebo, at, method = first.partition("@")
    return "+".join([Path(placebo).stem + at + method, *(Path(part).stem for part in overlays)])


def fit_args(arm: str, seed: int, root: Path, configs: Path, overrides: list[str],
             method_runs: Path | None = None) -> list[str]:
    """The `pgrpo fit` arguments of one cell (its logger is forced to the sweep layout); a yoked placebo's name its
    method's run at the same seed in `method_runs` (default: `root`)."""
    args = ["fit"]
    first, *overlays = arm.split("+")
    for part in [first.partition("@")[0], *overlays]:
        args += ["--config", str(config_of(part, arm, configs))]
    logger = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
              "init_args": {"save_dir": str(root), "name": arm_name(arm), "version": f"seed{seed}"}}
    method = yoked_method(arm)
    yoke = ([f"--model.intervention.init_args.yoked_to={method_run(method, seed, method_runs or root)}"]
            if method is not None else [])
    return args + [f"--seed_everything={seed}", f"--data.seed={seed}", f"--trainer.logger={json.dumps(logger)}",
                   "--trainer.enable_progress_bar=false", *yoke, *overrides]


def config_of(part: str, arm: str, configs: Path) -> Path:
    """One config of an arm: a .yaml path as given; else <configs>/<part>.yaml, or where that is no file, the one
    file of that name in a folder under <configs> (random_v: configs/placebos/random_v.yaml). Two such files are
    refused, naming both: which one the arm means is not the sweep's to guess."""
    if part.endswith(".yaml"):
        path = Path(part)
    else:
        path = configs / f"{part}.yaml"
        found = [] if path.is_file() else sorted(configs.rglob(f"{part}.yaml"))
        if len(found) > 1:
            raise FileNotFoundError(f"arm {arm!r}: {part!r} names {len(found)} configs ({', '.join(map(str, found))}); "
                                    f"name one by its folder, e.g. {found[0].relative_to(configs).with_suffix('')}")
        path = found[0] if found else path
    if not path.is_file():
        raise FileNotFoundError(f"arm {arm!r}: no config {path}")
    return path


def as_moved(argv: list[str]) -> list[str]:
    """A cell's recorded arguments with each config that has since moved into a folder beside it (no file where
    it was, one of the same name in a folder of the configs it was among: configs/random_v.yaml is now
    configs/placebos/random_v.yaml) named where it is now: a cell kept before configs/ was sorted into folders
    ran the same arguments as a plan's cell of that config today."""
    moved = list(argv)
    for at, (flag, value) in enumerate(zip(argv, argv[1:])):
        if flag == "--config" and not Path(value).is_file():
            there = sorted(Path(value).parent.glob(f"*/{Path(value).name}"))
            if len(there) == 1:
                moved[at + 1] = str(there[0])
    return moved


def refuse_other_arguments(cell: Path, argvs: list[list[str]], kept: bool = False) -> None:
    """A cell with progress (finished, or a checkpoint to resume) must not be continued with other arguments than
    one of the stages that run it (`argvs`, in stage order) gives it. `kept`: the cell as kept in --results, which a
    longer run may replace (from its kept checkpoint, else from step 0: the same arguments, taken further)."""
    record = read_record(cell)
    if record and record["argv"] not in argvs and (record["status"] == "done" or (cell / LAST).is_file()):
        if any(lengthens(record, argv, cell, need_checkpoint=not kept) for argv in argvs):
            return
        raise SystemExit(f"{cell} was run with other arguments ({' '.join(record['argv'])}); "
                         f"use another sweep name or delete that directory (a finished sweep may be rerun with a "
                         f"larger --trainer.max_steps=N alone, to go on to step N)")


def lengthens(record: dict, argv: list[str], cell: Path, need_checkpoint: bool = True) -> bool:
    """Whether `argv` is the cell's recorded arguments with only a larger --trainer.max_steps=N, and the cell
    has a checkpoint to go on from where `need_checkpoint` (its saved config.yaml says how far it was asked to run)."""
    def rest(args: list[str]) -> list[str]:
        return [a for a in args if not a.startswith(MAX_STEPS)]

    asked = asked_max_steps(argv)
    if asked is None or not asked.isdigit() or rest(record["argv"]) != rest(argv):
        return False
    if need_checkpoint and not (cell / LAST).is_file():
        return False
    ran = steps_run(cell, record)
    return isinstance(ran, int) and int(asked) > ran


def steps_run(cell: Path, record: dict) -> int | None:
    """The steps a finished cell ran to: a kept record names them (a keep cut short after copying the longer run's
    config but before its record must not hide them); a record in the logs, or one kept before records named them,
    leaves them to the run's config."""
    return record.get("max_steps", setting(load_config(cell) or {}, "trainer.max_steps", None))


def run_cell(cell: Path, argv: list[str], later: list[list[str]] = [], threads: int | None = None,
             kept: Path | None = None) -> tuple[bool, str]:
    """Run, resume or skip one cell: (finished, what happened in one line). `later`: the cell's arguments in the
    plan's later stages; a cell one of those already ran (lengthened) has been through this stage. `kept`: where
    the finished cell is kept (--results); one kept there with these arguments is not run again, and one a later
    stage goes on from keeps its last checkpoint, which a machine without the logs resumes from."""
    kept_record = read_record(kept) if kept else None
    if kept_record and kept_record["status"] == "done" and kept_record["argv"] == argv and evaluated(kept):
        if later:
            keep_checkpoint_of_the_kept_run(cell, kept)
        return True, f"skipped (finished; kept in {kept})"
    if kept_record and kept_record["status"] == "done" and kept_record["argv"] in later:
        return True, f"skipped (a later stage went on from it; kept in {kept})"
    record = read_record(cell)
    if record and record["status"] == "done" and record["argv"] == argv and evaluated(cell):
        if kept:
            keep_cell(cell, kept, checkpoint=bool(later))
        return True, "skipped (finished)" + (f"; kept in {kept}" if kept else "")
    if record and record["argv"] in later:
        return True, "skipped (a later stage went on from it)"
    resume = (cell / LAST).is_file()
    if not resume and cell.exists():
        shutil.rmtree(cell)  # a partial run without a checkpoint has nothing worth keeping: start clean
    if (not resume and kept_record and (kept / KEPT_CHECKPOINT).is_file()
            and lengthens(kept_record, argv, kept, need_checkpoint=False)):
        (cell / LAST).parent.mkdir(parents=True)  # the kept run goes on where it stopped, not again from step 0
        copy_whole(kept / KEPT_CHECKPOINT, cell / LAST)
        if (kept / CODE_FILE).is_file():  # the code of its earlier parts, which the resumed run goes on from
            shutil.copyfile(kept / CODE_FILE, cell / CODE_FILE)
        resume = True
    cell.mkdir(parents=True, exist_ok=True)
    # every machine that ran a part of it, in order: a resumed cell's later steps ran where the rerun did
    here = machine()
    earlier = (record or kept_record or {}).get("ran_on", []) if resume else []
    ran_on = earlier if earlier[-1:] == [here] else earlier + [here]
    write_record(cell, {"argv": argv, "status": "running", "ran_on": ran_on})
    start = time.perf_counter()
    rc = run_fit(argv + ([f"--ckpt_path={cell / LAST}"] if resume else []), cell / "fit.log", threads)
    seconds = time.perf_counter() - start
    unevaluated = rc == 0 and not evaluated(cell)
    code = load_code(cell)  # the code each part of it ran, as the run recorded it (a run from before did not)
    write_record(cell, {"argv": argv, "status": "done" if rc == 0 and not unevaluated else "failed", "returncode": rc,
                        "seconds": round(seconds, 1), "ran_on": ran_on} | ({"code": code} if code else {}))
    if unevaluated:
        with open(cell / "fit.log", "a") as log:
            log.write(f"pgrpo sweep: the run exited 0 without its end-of-run evaluation ({END_EVAL_FILE} at its "
                      f"last step), so it is not finished; a rerun resumes it from its last checkpoint\n")
        return False, f"FAILED (no end-of-run evaluation; see {cell / 'fit.log'})"
    if rc != 0:
        return False, f"FAILED (exit {rc}; see {cell / 'fit.log'})"
    if kept:
        keep_cell(cell, kept, checkpoint=bool(later))
    return True, ("resumed from its last checkpoint, " if resume else "") + f"done in {seconds:.0f} s"


def evaluated(cell: Path) -> bool:
    """Whether a run holds the end-of-run evaluation its config asks for, at its last step: its primary numbers.
    One killed between its final checkpoint and the evaluation, then resumed by a pgrpo that skipped the evaluation
    when no step was left to train, exited 0 without it."""
    config = load_config(cell) or {}
    if not setting(config, "end_eval.samples_per_problem", 0):
        return True
    steps = setting(config, "trainer.max_steps", -1)
    return evaluated_at(cell, steps if steps >= 0 else None)  # -1: the epochs decide where it stopped


def refuse_uncommitted_code(protocol: str) -> None:
    """Before any cell of a confirmatory plan runs: refuse a pgrpo whose code is not committed as it stands, naming
    each uncommitted change (pgrpo.records.provenance: git status of its checkout, the kept results aside)."""
    if not Path(protocol).is_file():
        raise SystemExit(f"--protocol {protocol}: no such file (a confirmatory plan names the protocol it runs under)")
    code = code_record()
    if "commit" not in code:
        raise SystemExit(f"--protocol {protocol}: a confirmatory plan runs committed code only, but pgrpo "
                         f"{code['version']} does not run from its git checkout, so that cannot be told; run the plan "
                         f"from a clone of the repository")
    if not code["clean"]:
        raise SystemExit(f"--protocol {protocol}: a confirmatory plan runs committed code only, but the checkout "
                         f"{REPOSITORY} has uncommitted changes ({NOT_CODE}/ aside):\n  " + "\n  ".join(code["changed"])
                         + "\ncommit or remove them, then rerun")


class OtherBase(Exception):
    """A finished cell trained on another base than the cells kept before it: another machine built the embedded
    default's recipe to other bytes (a build's last bits depend on its thread count), and a report does not pool
    them."""


def kept_bases(store: Path, besides: Path | None = None) -> dict[str, tuple[str, str, Path]]:
    """The bases the cells kept in `store` (<results>/<sweep>) trained on, by the model name a run was given
    (embedded, embedded-distinct): name -> (model_id, files digest, a cell)."""
    bases: dict[str, tuple[str, str, Path]] = {}
    for path in sorted(store.glob(f"*/*/{BASE_FILE}")):
        base = load_base(path.parent)
        if base and path.parent != besides:
            bases.setdefault(base["model"], (base["model_id"], base["digest"], path.parent))
    return bases


def refuse_another_cached_base(store: Path) -> None:
    """Before any cell runs: refuse a checkout or environment that keys one of the kept cells' bases otherwise (its
    recipe hashes the sources that build it and torch's version: every cell would build and train on another base),
    and a cache that holds their base built to other bytes (every cell would train on it and none be kept)."""
    for name, (kept_id, digest, cell) in kept_bases(store).items():
        current = model_id(name)
        if not same_base(kept_id, current):
            raise SystemExit(f"this checkout and environment key base {name!r} as {current}, but the cells kept in "
                             f"{store} ({cell}, ...) trained on {kept_id}: what keys it (an embedded base's sources and "
                             f"torch's version; a primed one's model file, data and settings) differs here, so every "
                             f"cell would train on another base; run the "
                             f"sweep at the commit and with the set-up its protocol names (make setup)")
        cached = cached_digest(name, kept_id)
        built_on = (load_base(cell) or {}).get("built_on")  # recorded for a primed base since 2026-12-05
        where = f", built on {built_on}" if built_on else ""
        if cached is not None and cached != digest:
            raise SystemExit(f"the cache holds base {kept_id} with files sha256 {cached[:16]}, but the cells kept in "
                             f"{store} ({cell}, ...) trained on {digest[:16]}{where}: put theirs in the cache first "
                             f"(a primed base: merged from the update published for it, pgrpo/model/primings/, or trained on "
                             f"a CPU that trains their bytes; this one is {cpu_kind()}; results/README.md)")
        if cached is None and built_on and built_on != cpu_kind() and not merges_published_update(name):
            announce(f"the cells kept in {store} ({cell}, ...) trained on base {name!r} as built on {built_on}; this "
                     f"machine is {cpu_kind()}: a primed base's bytes depend on the CPU (pgrpo.model.substrate), so the one "
                     f"built here may differ, and then no cell of it is kept (results/README.md)")


class OtherV(OtherBase):
    """A finished cell trained with another V than the cells kept before it took from the same inputs (the same
    model, pairs and settings): V's last bits depend on the thread count and the machine that extract it
    (pgrpo.directions.basis), and a plan's cells train with one V, or their method differs."""


def kept_vs(store: Path) -> dict[str, tuple[dict, Path]]:
    """The Vs the cells kept in `store` (<results>/<sweep>) took from the cache, by what each is extracted from:
    inputs_key -> (its record in basis.json's meta, a cell). Cells kept before runs recorded it say nothing."""
    vs: dict[str, tuple[dict, Path]] = {}
    for path in sorted(store.glob(f"*/*/{BASIS_FILE}")):
        meta = load_basis(path.parent)["meta"]
        if "inputs_key" in meta:
            vs.setdefault(meta["inputs_key"], (meta, path.parent))
    return vs


def refuse_another_v(cell: Path, kept: Path) -> None:
    """OtherV for a cell whose V (a placebo: the V it was drawn like) was extracted to other numbers than the V the
    kept cells (this one's shorter run among them: a longer run joins it) took from the same inputs."""
    meta = (load_basis(cell) or {"meta": {}})["meta"]
    found = kept_vs(kept.parent.parent).get(meta.get("inputs_key"))
    if found and found[0]["digest_as_extracted"] != meta["digest_as_extracted"]:
        theirs, other = found
        raise OtherV(f"{cell} trained with V {meta['inputs_key']} of {extracted(meta)}, but {other} (kept) with "
                     f"{extracted(theirs)}: its cells are not kept (and this one is removed from {cell.parent}); "
                     f"extract it as they did (a V kept in results/bases/ is restored at their thread count on their "
                     f"machine's kind; results/README.md) and rerun")


def extracted(meta: dict) -> str:
    """How a V was extracted, in words: its digest, the thread count and the machine."""
    return (f"sha256 {meta['digest_as_extracted'][:16]} (extracted at threads={meta.get('threads')} on "
            f"{meta.get('machine')})")


def keep_v_file(cell: Path, bases: Path) -> None:
    """Keep, once, the V a cell took from the cache in `bases` (<results>/bases/v-<digest>.safetensors) where it is
    small (KEPT_V_MAX_BYTES), so that a machine of the kind and thread count that extracted it restores the kept
    cells' very V (pgrpo.directions.basis); its digest is checked first (the cache's copy may have been replaced since)."""
    meta = (load_basis(cell) or {"meta": {}})["meta"]
    if "cache_key" not in meta:
        return
    source = cache_dir() / "bases" / f"{meta['cache_key']}.safetensors"
    target = bases / f"{KEPT_PREFIX}{meta['digest_as_extracted'][:16]}.safetensors"
    if target.is_file() or not source.is_file() or source.stat().st_size > KEPT_V_MAX_BYTES:
        return
    if HackBasis.load(source).digest() == meta["digest_as_extracted"]:
        bases.mkdir(parents=True, exist_ok=True)
        copy_whole(source, target)


def keep_cell(cell: Path, kept: Path, checkpoint: bool = False) -> None:
    """Copy a finished cell's record, config, base, V's record, code, end-of-run evaluation, output and scalars to
    `kept`, and its last checkpoint where a later stage goes on from it (`checkpoint`); its record last, so that a
    copy cut short is never taken for this run finished. Refused (OtherBase) for a cell whose base has another
    model_id or other bytes than the cells kept beside it (<results>/<sweep>/*/*/) trained on under the same model
    name (a stage on another model, the distinct-openings twin, is its own), and (OtherV) for one whose V has other
    numbers than the V they took from the same inputs. The V it took from the cache is kept once in
    <results>/bases/ (keep_v_file).

    A cell kept before at fewer steps N (a later stage lengthened it) keeps what the longer run does not repeat: its
    steps 0..N-1 are the kept run's alone, steps from N on the longer run's (a rerun from step 0 on another machine
    neither rewrites published steps nor adds to them: a tag logged only at some steps, a loophole mode's rate,
    lands on others), so the shorter run's end-of-run evaluation stays at its last step, and its end_eval.json and
    fit.log stay beside the new ones as end_eval.<N>steps.json and fit.<N>steps.log."""
    base = load_base(cell)
    kept_base = kept_bases(kept.parent.parent, besides=kept).get(base["model"]) if base else None
    if base and kept_base and kept_base[:2] != (base["model_id"], base["digest"]):
        kept_id, digest, other = kept_base
        raise OtherBase(f"{cell} trained on base {base['model_id']} with files sha256 {base['digest'][:16]}, but "
                        f"{other} (kept) on {kept_id} with {digest[:16]}: this machine built its base "
                        f"{base['model']!r} otherwise, so its cells are not kept (and this one is removed from "
                        f"{cell.parent}); put the kept cells' base in the cache (results/README.md) and rerun")
    refuse_another_v(cell, kept)
    scalars = read_scalars(cell)
    steps = setting(load_config(cell) or {}, "trainer.max_steps", None)
    kept_record = read_record(kept)
    earlier = steps_run(kept, kept_record) if kept_record else None
    if earlier is not None and earlier != steps:
        scalars = published_then_longer(read_scalars(kept), scalars, earlier)
        for name, shorter in ((END_EVAL_FILE, f"end_eval.{earlier}steps.json"), ("fit.log", f"fit.{earlier}steps.log")):
            if (kept / name).is_file():
                (kept / name).rename(kept / shorter)
    kept.mkdir(parents=True, exist_ok=True)
    keep_scalars(scalars, kept / KEPT_SCALARS)  # a superset of what was kept: a copy cut short loses nothing
    for name in (BASE_FILE, BASIS_FILE, CODE_FILE, POOL_FILE, END_EVAL_FILE, "fit.log", "config.yaml"):
        if (cell / name).is_file():
            shutil.copyfile(cell / name, kept / name)
    keep_v_file(cell, kept.parents[2] / "bases")
    if checkpoint and (cell / LAST).is_file():
        copy_whole(cell / LAST, kept / KEPT_CHECKPOINT)
    else:  # nothing goes on from this run: a shorter one's checkpoint would only mislead
        (kept / KEPT_CHECKPOINT).unlink(missing_ok=True)
    write_record(kept, read_record(cell) | {"max_steps": steps})


def published_then_longer(published: Scalars, longer: Scalars, steps: int) -> Scalars:
    """The kept run's scalars of its `steps` steps, then the longer run's from step `steps` on."""
    joined = {tag: [(s, v) for s, v in published.get(tag, []) if s < steps]
                   + [(s, v) for s, v in longer.get(tag, []) if s >= steps]
              for tag in published.keys() | longer.keys()}
    return {tag: values for tag, values in joined.items() if values}


def keep_checkpoint_of_the_kept_run(cell: Path, kept: Path) -> None:
    """A cell kept before kept cells held checkpoints gets its run's own from the logs, where they hold that run:
    the same output, byte for byte (another run of the same arguments elsewhere is not the kept one)."""
    if ((kept / KEPT_CHECKPOINT).is_file() or not (cell / LAST).is_file() or not (cell / "fit.log").is_file()
            or not (kept / "fit.log").is_file()):
        return
    if (cell / "fit.log").read_bytes() == (kept / "fit.log").read_bytes():
        copy_whole(cell / LAST, kept / KEPT_CHECKPOINT)


def copy_whole(src: Path, dst: Path) -> None:
    """Copy by rename: a copy cut short is never taken for the file (a torn checkpoint would not resume)."""
    tmp = dst.with_name(f"{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.rename(dst)


def run_fit(argv: list[str], log: Path, threads: int | None = None) -> int:
    """One `pgrpo fit` in a child process (a crash stays in the child), output appended to `log`."""
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    with open(log, "a") as out:
        child = subprocess.Popen([sys.executable, "-m", "pgrpo.cli", *argv], stdout=out, stderr=subprocess.STDOUT,
                                 env=env)
        try:
            return child.wait()
        finally:
            if child.poll() is None:  # the sweep itself was interrupted: leave no cell running behind it
                child.kill()
                child.wait()


def read_record(cell: Path) -> dict | None:
    """A cell's record (cell.json), its arguments naming each config where it is now (as_moved)."""
    path = cell / CELL_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return record | {"argv": as_moved(record["argv"])} if "argv" in record else record


def write_record(cell: Path, record: dict) -> None:
    tmp = cell / f"{CELL_FILE}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(cell / CELL_FILE)  # atomic: a sweep killed mid-write never leaves a torn record
