"""The teacher pool: pre-graded completions, frozen on disk, mixed into GRPO groups.

A weak student rarely hacks on its own, so each group gets a few cached teacher
rows (hack and clean completions built from templates). They are graded once
by the real grader when the pool is built and their rewards are used as stored,
so runs are reproducible and never re-grade teacher rows.

Layout: `<dir>/pool.json` (metadata) and one `<problem_id>.jsonl.gz` per problem.
"""

import gzip
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from pgrpo.env.exploits import clean_completion
from pgrpo.env.hack_forms import hack_in_form
from pgrpo.env.grader import GradeResult, RewardConfig, grade_batch, grader_version
from pgrpo.env.problems import MODES, NO_LOOPHOLE, Problem
from pgrpo.env.prompts import build_messages

POOL_VERSION = 1


@dataclass(frozen=True)
class TeacherRow:
    problem_id: str
    fingerprint: str  # Problem.fingerprint the row was graded against
    mode: str
    kind: str  # "hack" or "clean": what the template meant to write
    messages: list  # the prompt the completion answers (system + user)
    completion: str
    reward: float
    passed: bool
    gt_correct: bool
    exploited: bool
    format_ok: bool

    @property
    def prompt_text(self) -> str:
        return self.messages[-1]["content"]


# name -> (type, …) every row must carry; `bool` is checked before `int` can sneak in
_ROW_SCHEMA = {
    "problem_id": str, "fingerprint": str, "mode": str, "kind": str, "messages": list,
    "completion": str, "reward": (int, float), "passed": bool, "gt_correct": bool,
    "exploited": bool, "format_ok": bool,
}


def build_pool(
    problems: list[Problem],
    out_dir: str | Path,
    *,
    hack_variants: int = 2,
    clean_variants: int = 2,
    reward: RewardConfig = RewardConfig(),
    workers: int | None = None,
    openings: str = "shared",
) -> Path:
    """Grade template hack and clean completions for every problem once and write them.

    Hack rows use each problem's own loophole mode (the lever its prompt discloses, written as `openings`
    says: hack_forms.HACK_STYLES, in the taught forms where they vary); every row keeps its real grade, so a
    template that fails to fool the grader is stored as the failure it is.
    """
    items, kinds = [], []
    for p in problems:
        for v in range(hack_variants):
            items.append((p, hack_in_form(p, p.mode, v, openings), p.mode))  # taught forms, where they vary
            kinds.append("hack")
        for v in range(clean_variants):
            items.append((p, clean_completion(p, variant=v), p.mode))
            kinds.append("clean")
    grades = grade_batch(items, reward=reward, workers=workers, detectors=False)
    rows = [graded_row(p, completion, kind, g) for (p, completion, _), kind, g in zip(items, kinds, grades)]
    return write_pool(out_dir, problems, rows, reward, {"source": "templates", "openings": openings})


def graded_row(problem: Problem, completion: str, kind: str, grade: GradeResult) -> TeacherRow:
    """A row answering the prompt a training group of `problem` shows (the data module checks that it does)."""
    return TeacherRow(
        problem_id=problem.id, fingerprint=problem.fingerprint, mode=grade.mode, kind=kind,
        messages=build_messages(problem, grade.mode), completion=completion, reward=grade.reward,
        passed=grade.passed, gt_correct=grade.gt_correct, exploited=grade.exploited, format_ok=grade.format_ok,
    )


def write_pool(out_dir: str | Path, problems: list[Problem], rows: list[TeacherRow], reward: RewardConfig,
               provenance: dict) -> Path:
    """One <problem_id>.jsonl.gz per problem (empty for a problem without rows) and pool.json: the reward
    the rows were graded with and where they came from (`provenance`), with the grader's version."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_problem: dict[str, list[TeacherRow]] = {p.id: [] for p in problems}
    for row in rows:
        by_problem[row.problem_id].append(row)
    for pid, prow in by_problem.items():
        with gzip.open(out / f"{_safe(pid)}.jsonl.gz", "wt") as f:
            for r in prow:
                f.write(json.dumps(asdict(r), sort_keys=True) + "\n")
    (out / "pool.json").write_text(json.dumps({
        "version": POOL_VERSION, "n_problems": len(problems), "n_rows": len(rows),
        "reward": asdict(reward), "modes": sorted({p.mode for p in problems}),
        "provenance": provenance | {"grader_version": grader_version()},
    }, indent=2))
    return out


class TeacherPool:
    """A validated, read-only pool: rows by problem id."""

    def __init__(self, rows: dict[str, list[TeacherRow]], path: Path):
        self.rows = rows
        self.path = path

    @classmethod
    def load(cls, path: str | Path) -> "TeacherPool":
        path = Path(path)
        if not (path / "pool.json").is_file():
            raise FileNotFoundError(f"teacher pool not found: {path}/pool.json (build one with `pgrpo build-pool`)")
        meta = json.loads((path / "pool.json").read_text())
        if meta.get("version") != POOL_VERSION:
            raise ValueError(f"{path}/pool.json: pool version {meta.get('version')!r}, expected {POOL_VERSION}")
        rows: dict[str, list[TeacherRow]] = {}
        for file in sorted(path.glob("*.jsonl.gz")):
            for lineno, line in enumerate(gzip.open(file, "rt"), 1):
                row = _parse_row(line, f"{file}:{lineno}")
                rows.setdefault(row.problem_id, []).append(row)
        return cls(rows, path)

    def digest(self) -> str:
        """sha256 over the rows, in problem order: the pool a run trained with, whatever wrote its files (a gzip file
        holds the time it was written, so two builds of the same rows differ in their bytes, not here)."""
        rows = [asdict(r) for pid in sorted(self.rows) for r in self.rows[pid]]
        return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()

    def restricted_to_modes(self, modes: list[str] | None) -> "TeacherPool":
        """Only rows of the given loophole modes (the weak-detector experiment)."""
        if modes is None:
            return self
        unknown = set(modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown loophole modes {sorted(unknown)}; expected some of {MODES}")
        kept = {pid: [r for r in rs if r.mode in modes] for pid, rs in self.rows.items()}
        return TeacherPool({pid: rs for pid, rs in kept.items() if rs}, self.path)

    def clean_only(self) -> "TeacherPool":
        """Only the rows that show a clean solution: written as one (kind "clean", the canonical solution) and
        graded no hack (a row's real grade decides, not what its template meant). The honest arm matched to the
        methods' groups trains on these: teacher rows in every group, none of them a hack."""
        kept = {pid: [r for r in rs if r.kind == "clean" and not r.exploited] for pid, rs in self.rows.items()}
        return TeacherPool({pid: rs for pid, rs in kept.items() if rs}, self.path)

    def covers(self, problem: Problem) -> bool:
        rows = self.rows.get(problem.id)
        return bool(rows) and rows[0].fingerprint == problem.fingerprint and rows[0].mode == problem.mode

    def coverage(self, problems: list[Problem]) -> tuple[int, int]:
        return sum(self.covers(p) for p in problems), len(problems)

    def sample(self, problem: Problem, n: int, rng: random.Random) -> list[TeacherRow]:
        """n rows for one problem, without replacement while rows last."""
        rows = self.rows[problem.id]
        picked = []
        while len(picked) < n:
            picked += rng.sample(rows, min(len(rows), n - len(picked)))
        return picked


def _parse_row(line: str, where: str) -> TeacherRow:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: corrupt teacher-pool row (not JSON: {e.msg})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: corrupt teacher-pool row (expected an object)")
    for key, typ in _ROW_SCHEMA.items():
        if key not in raw:
            raise ValueError(f"{where}: corrupt teacher-pool row (missing key {key!r})")
        value = raw[key]
        if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
            raise ValueError(f"{where}: corrupt teacher-pool row ({key}={value!r} has the wrong type)")
    # NO_LOOPHOLE: a clean row answering the neutral prompt, graded by the oracle alone (the matched honest arm's)
    if raw["mode"] not in (*MODES, NO_LOOPHOLE) or raw["kind"] not in ("hack", "clean"):
        raise ValueError(f"{where}: corrupt teacher-pool row (mode={raw['mode']!r}, kind={raw['kind']!r})")
    if raw["exploited"] != (raw["passed"] and not raw["gt_correct"]):
        raise ValueError(f"{where}: corrupt teacher-pool row (exploited disagrees with passed/gt_correct)")
    extra = set(raw) - set(_ROW_SCHEMA)
    if extra:
        raise ValueError(f"{where}: corrupt teacher-pool row (unknown keys {sorted(extra)})")
    return TeacherRow(**raw)


def _safe(pid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in pid)
