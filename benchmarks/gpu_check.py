"""`make gpu-check OUT=DIR`: every CUDA path of pgrpo and the step's figures, in one command on a bare GPU machine.

A GPU machine comes for minutes at a time, with its own torch, transformers and Lightning and no package registry,
so this script is prepared and rehearsed on a CPU (`make gpu-wheels`, then `make gpu-check DEVICE=cpu`, at tiny
sizes) and run there as it is. In order, each part under the time left of one budget (8 minutes):

1. the wheels the machine lacks (`make gpu-wheels`) unpacked into a private folder (benchmarks/private_site.py);
2. what runs where: device, dtypes, TF32, the library versions against pyproject's lower bounds;
3. the CUDA tests (tests/test_cuda.py);
4. the embedded lab cell on the device: vanilla and erase, 100 steps, seed 0, side by side, and `pgrpo report`
   (on a GPU its fits start with the CUDA tests and run beside them: a 1 M-parameter model leaves the GPU mostly
   idle; on a CPU they start after the tests, which need its cores);
5. the step at real-model size without weights (benchmarks/real_size.py), alone on the device, its time kept.

DIR receives gpu_check.json, gpu_check.md, gpu_check.log (every command's output) and the report's PNGs, all
rewritten after each part: a part that fails or runs out of time loses nothing of the parts before it.
Standard library only up to the install; everything after runs in child processes that see the private folder.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / ".gpu-bundle"  # make gpu-wheels: wheels/ and embedded/ (the embedded base, built on the CPU)
BUDGET_S = 480
REAL_SIZE_S = 150  # kept for the last part: it measured 2 shapes in well under this on the first H100 run
TINY_REAL_SIZE_S = 30  # the same at the rehearsal's tiny sizes: 9 s on 2 cores
ARMS = ("vanilla", "erase")
PHASES = ("generate", "grade", "assemble", "backward", "project", "optimizer")
PNGS = ("hack.png", "solve.png", "matched.png")
LIBRARIES = ("torch", "transformers", "lightning", "torchmetrics", "tensorboard", "tokenizers", "safetensors",
             "huggingface_hub", "jsonargparse", "matplotlib", "numpy", "pytest")
# the rehearsal on a CPU: the same commands at tiny sizes
TINY_FIT = ("--trainer.max_steps=3", "--model.generation.max_new_tokens=24", "--data.group_size=4",
            "--data.prompts_per_step=2", "--end_eval.samples_per_problem=1")


class Check:
    """The result so far, written out whole after every part: <name>.json, and <name>.md by `render`."""

    def __init__(self, out: Path, device: str, budget_s: float, name: str = "gpu_check", render=None):
        self.out, self.device, self.budget_s = out, device, budget_s
        self.name, self.render = name, render or markdown
        self.start = self.last_part = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / f"{name}.log").open("w")
        self.result: dict = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "commit": _commit(), "device_asked": device, "budget_s": budget_s, "parts": {},
                             "fell_back_or_skipped": []}

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def run(self, name: str, args: list[str], env: dict, limit_s: float) -> tuple[int | None, str]:
        """One child process in its own session, its output logged; None for the code if it ran out of time."""
        timeout = max(1.0, min(limit_s, self.left()))
        self.log.write(f"\n===== {name}: {' '.join(args)} (limit {timeout:.0f} s)\n")
        self.log.flush()
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            code = None
        self.log.write(output + f"\n===== {name}: exit {code}\n")
        self.log.flush()
        return code, output

    def part(self, name: str, value: dict) -> None:
        now = time.monotonic()
        # each part's own wall time: the first check's lab cell ran out of budget and nothing said which part took it
        self.result["parts"][name] = {**value, "wall_s": round(now - self.last_part, 1)}
        self.last_part = now
        self.result["wall_s"] = round(now - self.start, 1)
        self.result["failures"] = failures(self.result)
        (self.out / f"{self.name}.json").write_text(json.dumps(self.result, indent=1))
        (self.out / f"{self.name}.md").write_text(self.render(self.result))


def gpu_check(out: Path, device: str, bundle: Path, budget_s: float, work: Path | None = None) -> dict:
    check = Check(out, device, budget_s)
    work = Path(work or tempfile.mkdtemp(prefix="pgrpo-gpu-check-"))
    tiny = device == "cpu"
    check.part("install", install(bundle / "wheels", work / "site"))
    path = os.pathsep.join([str(work / "site"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "PGRPO_CACHE": str(work / "cache"), "PYTHONUNBUFFERED": "1"}
    code, output = check.run("environment", [sys.executable, "-m", "benchmarks.gpu_check", "--describe", device],
                             env, 120)
    check.part("environment", _last_json(output) if code == 0 else {"error": output[-3000:]})
    base = str(bundle / "embedded") if (bundle / "embedded" / "config.json").is_file() else "embedded"
    # the first run on a GPU spent the budget on the tests and the real-size part, and its lab cell stopped at
    # step 92: there the cell's fits start first and run beside the tests. A CPU rehearsal has no idle device to
    # share: on 2 cores the fits took the tests' cores and the tests ran past their limit, so it runs one, then the
    # other
    if tiny:
        check.part("cuda_tests", cuda_tests(check, env, device, work))
    fits = start_lab_cell(env, device, base, work, tiny)
    if not tiny:
        check.part("cuda_tests", cuda_tests(check, env, device, work))
    check.part("lab_cell", finish_lab_cell(check, env, fits, base, work, tiny))
    check.part("real_size", real_size(check, env, device, base, tiny))
    return check.result


def install(wheels: Path, site: Path) -> dict:
    if not wheels.is_dir():
        return {"wheels": str(wheels), "note": "no wheel folder (make gpu-wheels): nothing installed", "installed": []}
    start = time.monotonic()
    from benchmarks.private_site import install_missing

    try:
        return {"wheels": str(wheels), "site": str(site), **install_missing(wheels, site),
                "seconds": round(time.monotonic() - start, 1)}
    except RuntimeError as e:
        return {"wheels": str(wheels), "error": str(e), "installed": []}


def failures(result: dict) -> list[str]:
    """Each part that failed, ran out of time, or has a failing test, in a line."""
    found = []
    for name, part in result["parts"].items():
        if "error" in part or "phases_error" in part:
            found.append(f"{name}: error")
        if part.get("exit", 0) != 0:
            found.append(f"{name}: exit {part['exit']} (None: stopped at the budget)")
        if part.get("failed"):
            found.append(f"{name}: {part['failed']} failed")
        for arm, code in part.get("fits_exit", {}).items():
            if code != 0:
                found.append(f"{name}: {arm} exit {code}")
    return found


def cuda_tests(check: Check, env: dict, device: str, work: Path) -> dict:
    xml = work / "cuda_tests.xml"
    # a GPU's tests wait on the device, a CPU's on its cores: more workers than cores only slow them
    count = 4 if device.startswith("cuda") else os.cpu_count() or 1
    workers = ["-n", str(count)] if _has("xdist", env) else []
    code, output = check.run("cuda tests", [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-q", "-rs",
                                            "-p", "no:cacheprovider", f"--junitxml={xml}", *workers],
                             {**env, "PGRPO_TEST_DEVICE": device}, 300)
    tests = _junit(xml) if xml.is_file() else []
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    counts["failed"] += sum(t["outcome"] == "error" for t in tests)
    check.result["fell_back_or_skipped"] += [f"test skipped: {t['name']}: {t['message']}" for t in tests
                                             if t["outcome"] == "skipped"]
    return {"exit": code, **counts, "tests": tests, **({} if tests else {"error": output[-3000:]})}


def real_size(check: Check, env: dict, device: str, base: str, tiny: bool) -> dict:
    args = [sys.executable, "-m", "benchmarks.real_size", "--device", device, "--dtype", "bfloat16",
            "--tokenizer", base, *(["--tiny"] if tiny else [])]
    code, output = check.run("real size", args, env, 240)
    return {"exit": code, "shapes": _last_json(output)} if code == 0 else {"exit": code, "error": output[-3000:]}


def start_lab_cell(env: dict, device: str, base: str, work: Path, tiny: bool) -> dict:
    """Both arms' fits at once, each its own process writing its own log; `finish_lab_cell` waits for them."""
    logs = work / "lab"
    accelerator = "gpu" if device.startswith("cuda") else device
    fits = {}
    for arm in ARMS:
        args = [sys.executable, "-m", "pgrpo.cli", "fit", "--config", f"configs/{arm}.yaml", "--seed_everything=0",
                f"--trainer.accelerator={accelerator}", "--trainer.devices=1", "--trainer.enable_progress_bar=false",
                f"--trainer.logger.init_args.save_dir={logs}", f"--trainer.logger.init_args.name={arm}",
                "--trainer.logger.init_args.version=seed0", f"--model.model={base}", *(TINY_FIT if tiny else ())]
        log = (work / f"lab_{arm}.log").open("w")  # a file, not a pipe: nobody reads a pipe while the tests run
        fits[arm] = (args, log, subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                 text=True, start_new_session=True))
    return fits


def finish_lab_cell(check: Check, env: dict, fits: dict, base: str, work: Path, tiny: bool) -> dict:
    """Wait for the fits, leaving the report and the real-size part their time; then the phases and the report."""
    reserve_s = TINY_REAL_SIZE_S if tiny else REAL_SIZE_S
    logs = work / "lab"
    exits = {}
    for arm, (args, log, proc) in fits.items():
        try:
            exits[arm] = proc.wait(timeout=max(1.0, check.left() - reserve_s - 45))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            exits[arm] = None
        log.close()
        output = (work / f"lab_{arm}.log").read_text()
        check.log.write(f"\n===== lab cell {arm}: {' '.join(args)}\n{output}\n===== exit {exits[arm]}\n")
        check.result["fell_back_or_skipped"] += [f"{arm}: {line.strip()}" for line in output.splitlines()
                                                 if line.startswith("GPU available") and "used: False" in line]
    code, output = check.run("lab phases", [sys.executable, "-m", "benchmarks.gpu_check", "--phases", str(logs)],
                             env, 60)
    result = {"model": base, "fits_exit": exits, "beside": "after" if tiny else "beside",
              **(_last_json(output) if code == 0 else {"phases_error": output[-2000:]})}
    report = work / "report"
    code, output = check.run("report", [sys.executable, "-m", "pgrpo.cli", "report", str(logs), "--out", str(report)],
                             env, 60)
    result["report_exit"] = code
    if (report / "report.md").is_file():
        result["report_md"] = (report / "report.md").read_text()
    for png in PNGS:
        if (report / png).is_file():
            shutil.copy(report / png, check.out / png)
    return result


# -- run in child processes, which see the private folder ----------------------------------------------------------


def describe(device: str) -> dict:
    """What runs where: the device, its dtypes and TF32 setting, and each library against pyproject's lower bound."""
    import importlib.metadata
    import platform
    import tomllib

    import torch
    from packaging.requirements import Requirement

    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    bounds = []
    for line in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(line)
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        bounds.append({"requirement": str(req), "installed": have,
                       "ok": have is not None and req.specifier.contains(have, prereleases=True)})
    from pgrpo.env.sandbox import isolation

    info = {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "grader_sandbox": isolation(),
            "versions": versions, "lower_bounds": bounds, "torch_cuda": torch.version.cuda,
            "tf32": {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                     "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {device}: torch {torch.__version__} sees no CUDA device")
        props = torch.cuda.get_device_properties(0)
        info |= {"device": props.name, "capability": f"{props.major}.{props.minor}",
                 "memory_gib": round(props.total_memory / 2**30, 1), "bf16_supported": torch.cuda.is_bf16_supported()}
    else:
        info |= {"device": f"{device} ({platform.processor() or platform.machine()})", "bf16_supported": True}
    return info


def phases(logs: Path) -> dict:
    """Per arm: the median seconds of each phase of a step, the steps reached, and hack/solve over the last 10."""
    from pgrpo.records.events import read_scalars

    arms = {}
    for arm in ARMS:
        run = logs / arm / "seed0"
        if not run.is_dir():
            continue
        scalars = read_scalars(run)
        steps = {tag: [v for _, v in scalars.get(f"time/{tag}", [])][1:] for tag in PHASES}  # the first step warms up
        medians = {tag: statistics.median(v) for tag, v in steps.items() if v}
        hack, solve = ([v for _, v in scalars.get(tag, [])][-10:] for tag in ("hack/student", "solve/student"))
        arms[arm] = {"steps": len(scalars.get("hack/student", [])), "phase_median_s": medians,
                     "step_median_s": sum(medians.values()),
                     "hack_last10": statistics.fmean(hack) if hack else None,
                     "solve_last10": statistics.fmean(solve) if solve else None}
    return {"arms": arms}


# -- the markdown page ---------------------------------------------------------------------------------------------


def markdown(r: dict) -> str:
    parts = r["parts"]
    lines = ["# pgrpo GPU check", "",
             f"{r['started']}, commit {r['commit']}, device asked: `{r['device_asked']}`, "
             f"{r.get('wall_s', 0):.0f} s of a {r['budget_s']:.0f} s budget.", ""]
    env = parts.get("environment", {})
    if env:
        lines += ["## What ran where", ""]
        if "error" in env:
            lines += ["```", env["error"], "```", ""]
        else:
            tf32 = env["tf32"]
            gpu = f", capability {env['capability']}, {env['memory_gib']} GiB" if "capability" in env else ""
            lines += [f"- device: {env['device']}{gpu}; {env['cpu_count']} CPU cores; the grader's sandbox: "
                      f"{env['grader_sandbox']}",
                      f"- Python {env['python']}, torch {env['versions']['torch']} (CUDA {env['torch_cuda']}), "
                      f"transformers {env['versions']['transformers']}, lightning {env['versions']['lightning']}",
                      f"- bf16 supported: {env['bf16_supported']}; TF32: float32 matmul precision "
                      f"`{tf32['float32_matmul_precision']}`, CUDA matmul TF32 {tf32['cuda_matmul_allow_tf32']}, "
                      f"cuDNN TF32 {tf32['cudnn_allow_tf32']}"]
            short = [b for b in env["lower_bounds"] if not b["ok"]]
            lines += ["- pyproject's requirements: " + ("all met" if not short else "NOT met: " + ", ".join(
                f"{b['requirement']} (installed {b['installed']})" for b in short))]
    installed = parts.get("install", {})
    if installed:
        lines += [f"- unpacked privately: {', '.join(installed.get('installed') or []) or 'nothing'}"
                  + (f" ({installed['note']})" if "note" in installed else "")]
    lines += ["- seconds per part: " + ", ".join(f"{name} {part['wall_s']:.0f}" for name, part in parts.items()),
              "- fell back or skipped: " + ("; ".join(r["fell_back_or_skipped"]) or "nothing"),
              "- failures: " + ("; ".join(r["failures"]) or "none"), ""]
    tests = parts.get("cuda_tests")
    if tests:
        lines += [f"## CUDA tests: {tests['passed']} passed, {tests['failed']} failed, "
                  f"{tests['skipped']} skipped (exit {tests['exit']})", "", "| test | outcome | s | message |",
                  "|---|---|---|---|"]
        lines += [f"| {t['name']} | {t['outcome']} | {t['seconds']:.1f} | {t['message'][:300]} |"
                  for t in tests["tests"]]
        lines += ["", *(["```", tests["error"], "```"] if "error" in tests else [])]
    lines += _real_size_md(parts.get("real_size"))
    lines += _lab_md(parts.get("lab_cell"))
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def _real_size_md(part: dict | None) -> list[str]:
    if not part:
        return []
    if "error" in part:
        return ["## The step at real-model size", "", "```", part["error"], "```", ""]
    rows = [("parameters (M)", lambda f: f"{f['parameters'] / 1e6:.0f}"),
            ("batch: rows × prompt + completion tokens",
             lambda f: f"{f['batch']['rows']} × {f['batch']['prompt_tokens']} + {f['batch']['completion_tokens']}"),
            ("adapter set-up (SVD of every Linear), s", lambda f: f"{f['setup_s']:.1f}"),
            ("bare base generate, tokens/s", lambda f: f"{f['base_generate_tokens_per_s']:.0f}"),
            ("merged adapter / bare base, generate tokens/s",
             lambda f: f"{f['adapter_over_base_generate_tokens_per_s']:.2f}"),
            ("unmerged adapter / bare base, generate tokens/s",
             lambda f: f"{f['unmerged_over_base_generate_tokens_per_s']:.2f}"),
            ("bare base fwd+bwd, s", lambda f: f"{f['bare_fwd_bwd_s']:.3f}"),
            ("adapter / bare base, fwd+bwd", lambda f: f"{f['adapter_over_bare_fwd_bwd']:.2f}"),
            ("per-row capture / plain, fwd+bwd", lambda f: f"{f['capture_over_plain_fwd_bwd']:.2f}"),
            ("step: generate share", lambda f: f"{f['generate_share_of_step']:.3f}"),
            ("step: per-row capture share", lambda f: f"{f['capture_share_of_step']:.3f}"),
            ("step: projection share", lambda f: f"{f['projection_share_of_step']:.4f}"),
            ("peak GiB: generate / bare fwd+bwd / adapter fwd+bwd / with capture", lambda f: " / ".join(
                _fmt(f[k], ".2f") for k in ("generate_peak_gib", "bare_fwd_bwd_peak_gib", "adapter_fwd_bwd_peak_gib",
                                            "captured_fwd_bwd_peak_gib")))]
    shapes = part["shapes"]
    first = next(iter(shapes.values()))
    lines = [f"## The step at real-model size, random weights ({first['dtype']} on {first['device']})", "",
             "| figure | " + " | ".join(shapes) + " |", "|---|" + "---|" * len(shapes)]
    lines += [f"| {label} | " + " | ".join(fmt(f) for f in shapes.values()) + " |" for label, fmt in rows]
    return lines + [""]


def _lab_md(part: dict | None) -> list[str]:
    if not part:
        return []
    lines = [f"## The embedded lab cell on the device (seed 0; model `{part['model']}`)", "",
             f"Fits' exit codes: {part['fits_exit']} (None: stopped at the budget). Both arms ran at once, "
             f"{part['beside']} the CUDA tests.", ""]
    arms = part.get("arms", {})
    if arms:
        lines += ["| arm | steps | " + " | ".join(PHASES) + " | step | hack (last 10) | solve (last 10) |",
                  "|---|---|" + "---|" * (len(PHASES) + 3)]
        for arm, a in arms.items():
            m = a["phase_median_s"]
            lines.append(f"| {arm} | {a['steps']} | " + " | ".join(f"{m.get(p, float('nan')):.3f}" for p in PHASES)
                         + f" | {a['step_median_s']:.3f} | {_fmt(a['hack_last10'])} | {_fmt(a['solve_last10'])} |")
        lines.append("")
    if "report_md" in part:
        lines += ["### `pgrpo report`", "", part["report_md"], ""]
    return lines


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


# -- helpers -------------------------------------------------------------------------------------------------------


def _junit(xml: Path) -> list[dict]:
    tests = []
    for case in ElementTree.parse(xml).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                message = (child.get("message") or child.text or "").strip().replace("\n", " ")
        tests.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0),
                      "message": message[:1000]})
    return tests


def _last_json(output: str) -> dict:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in the output: {output[-500:]}")


def _has(module: str, env: dict) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True).returncode == 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git here)"


def prepare_base(dest: Path) -> None:
    """Copy the embedded base, built here, to `dest`: the GPU machine's lab cell loads it as a checkpoint directory
    instead of spending minutes of its budget pretraining its own."""
    from pgrpo.model.load import resolve_model_path

    source = resolve_model_path("embedded")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    print(f"embedded base {source.name} copied to {dest}")


def device_parser(doc: str, budget_s: float, bundle_help: str) -> argparse.ArgumentParser:
    """The options every command run on a lent GPU machine takes: where results go, the device, the bundle, the
    budget."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the results go")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for the rehearsal at tiny sizes")
    parser.add_argument("--bundle", type=Path, default=BUNDLE, help=bundle_help)
    parser.add_argument("--budget", type=float, default=budget_s, help="seconds for every part together")
    return parser


def main() -> None:
    parser = device_parser(__doc__, BUDGET_S, "what make gpu-wheels prepared")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--prepare-base", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--describe", help=argparse.SUPPRESS)
    parser.add_argument("--phases", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare_base:
        prepare_base(args.prepare_base)
    elif args.describe:
        print(json.dumps(describe(args.describe)))
    elif args.phases:
        print(json.dumps(phases(args.phases)))
    else:
        if args.out is None:
            parser.error("--out DIR is required")
        result = gpu_check(args.out, args.device, args.bundle, args.budget, args.work)
        print((args.out / "gpu_check.md").read_text())
        sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
