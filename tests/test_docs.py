"""The docs a newcomer reads stay true to the tree: links, anchors, configs, commands, make targets, length.

The pages checked are the ones people write: README.md and docs/*.md. The report.md files under docs/<sweep>/
are `pgrpo report`'s output (tests/test_report.py covers what it writes); they are linked, not linted.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify as mkdocs_slugify

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
CONFIG = re.compile(r"configs/[\w./-]*?\.yaml")
# a command word where a shell would run it: at the start of a line or span, or after && ; { | $(,
# optionally behind a venv's bin/ ("pgrpo builds" in a sentence is not a command)
COMMAND_AT = r"(?:^|&&|;|\{|\||\$\()[ \t]*(?:[\w.-]*/)*PROGRAM[ \t]+([A-Za-z][\w-]*)"
PGRPO_COMMAND = re.compile(COMMAND_AT.replace("PROGRAM", "pgrpo"), re.M)
MAKE_TARGET = re.compile(COMMAND_AT.replace("PROGRAM", "make"), re.M)
SWEEP_ARMS = re.compile(r"pgrpo[ \t]+sweep\b.*?--arms[ \t=]+'\[([^\]]*)\]'")


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def prose(markdown: str) -> str:
    """The page without its fenced blocks: a link or heading inside code is not one."""
    return FENCE.sub("", markdown)


def code(markdown: str) -> list[str]:
    """Every piece of code on the page: each fenced block's lines joined at `\\` continuations, and each inline
    span with its line breaks folded (a span may wrap in the source)."""
    blocks = [m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0] for m in FENCE.finditer(markdown)]
    spans = [" ".join(m.group(1).split()) for m in INLINE_CODE.finditer(prose(markdown))]
    return [re.sub(r"\\\n[ \t]*", " ", block) for block in blocks] + spans


def github_slug(heading: str) -> str:
    """GitHub's anchor: lowercase, punctuation but '-' and '_' dropped, each space a '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def heading_text(raw: str) -> str:
    """A heading as rendered, which is what both slugifiers see: no code ticks, emphasis or link targets."""
    raw = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    return unicodedata.normalize("NFC", raw.replace("`", "").replace("**", "").replace("*", ""))


def anchors(page: Path) -> set[str]:
    """Anchors that work on both GitHub and the mkdocs site: a link must survive either reader."""
    headings = [heading_text(h) for h in HEADING.findall(prose(text(page)))]
    return {mkdocs_slugify(h, "-") for h in headings} & {github_slug(h) for h in headings}


def test_heading_anchors_are_the_ones_mkdocs_and_github_generate():
    heading = heading_text("The benchmark's evaluation (`pgrpo eval`)")
    assert mkdocs_slugify(heading, "-") == github_slug(heading) == "the-benchmarks-evaluation-pgrpo-eval"
    heading = heading_text("Delay or prevention: 300 steps")
    assert mkdocs_slugify(heading, "-") == github_slug(heading) == "delay-or-prevention-300-steps"
    # where the two disagree (an em dash: GitHub keeps both spaces' dashes), neither anchor is trusted
    assert github_slug("a — b") != mkdocs_slugify("a — b", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_on_a_page_points_at_something_that_exists(page):
    broken = []
    # link text may hold code ([`pgrpo eval`](evaluation.md)) and code may look like a link: drop the code
    for target in LINK.findall(INLINE_CODE.sub("", prose(text(page)))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not the tree's to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(REPO) if file.is_relative_to(REPO) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading in {file.relative_to(REPO)} gives #{anchor}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_a_page_names_exists(page):
    missing = sorted({c for c in CONFIG.findall(text(page)) if not (REPO / c).is_file()})
    assert not missing, missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_arm_of_a_documented_sweep_resolves_to_configs(page, tmp_path):
    from pgrpo.commands.sweep import fit_args

    bad = []
    for snippet in code(text(page)):
        for arms in SWEEP_ARMS.findall(snippet):
            for arm in (a.strip() for a in arms.split(",") if a.strip()):
                try:
                    fit_args(arm, 0, tmp_path, REPO / "configs", [])  # the sweep's own lookup, + overlays included
                except FileNotFoundError as err:
                    bad.append(str(err))
    assert not bad, bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_pgrpo_command_in_a_pages_code_is_a_real_subcommand(page):
    from pgrpo.cli import TOOLS
    from pgrpo.commands.fit import PGRPOCLI

    # what main() dispatches: the plain tools by name, and the LightningCLI's subcommands
    commands = set(TOOLS) | set(PGRPOCLI.subcommands())
    named = {c for snippet in code(text(page)) for c in PGRPO_COMMAND.findall(snippet)}
    assert named <= commands, sorted(named - commands)


def makefile_targets() -> set[str]:
    rules = re.findall(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", text(REPO / "Makefile"), re.M)
    return {target for rule in rules for target in rule.split() if not target.startswith(".")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_make_target_in_a_pages_code_is_in_the_makefile(page):
    named = {t for snippet in code(text(page)) for t in MAKE_TARGET.findall(snippet)}
    assert named <= makefile_targets(), sorted(named - makefile_targets())


def test_the_readme_stays_short_enough_to_read_in_one_sitting():
    lines = len(text(REPO / "README.md").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_code_that_cites_the_design_page_cites_a_section_that_exists():
    cited = [(path, anchor) for path in sorted((REPO / "pgrpo").rglob("*.py"))
             for anchor in re.findall(r"docs/design\.md#([\w-]+)", text(path))]
    assert cited, "pgrpo cites docs/design.md sections; this test should see them"
    missing = [f"{path.relative_to(REPO)}: #{anchor}" for path, anchor in cited
               if anchor not in anchors(REPO / "docs" / "design.md")]
    assert not missing, missing


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs and mkdocs-material are not installed (the docs extra: make docs installs it)")
def test_the_docs_site_builds_with_no_warnings(tmp_path):
    # --strict turns mkdocs' warnings (a missing nav file, a broken link or anchor) into a failed build;
    # the theme's end-of-life banner is not one of them and is switched off
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "WARNING" not in run.stderr + run.stdout, run.stderr + run.stdout


def test_the_docs_index_of_modules_is_the_packages():
    from test_configs import load_indexes

    indexes = load_indexes()
    assert indexes.in_page("modules") == indexes.module_index(), (
        f"docs/design.md's index of modules is not the package's (a module added, moved or removed, or the first "
        f"sentence of its docstring reworded): run `{indexes.COMMAND}` and commit the page")


def test_the_index_check_sees_a_module_added_moved_or_removed(tmp_path):
    from test_configs import load_indexes

    indexes = load_indexes()
    shutil.copytree(REPO / "pgrpo", tmp_path / "pgrpo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copyfile(REPO / "docs" / "design.md", tmp_path / "docs" / "design.md")

    def fresh() -> bool:
        return indexes.in_page("modules", tmp_path) == indexes.module_index(tmp_path)

    assert fresh()
    (tmp_path / "pgrpo" / "step" / "new_part.py").write_text('"""A new part of the step. What it holds."""\n')
    assert not fresh()
    indexes.write(tmp_path, ("modules",))  # what the command does
    assert fresh() and "- `new_part.py`: A new part of the step\n" in (tmp_path / "docs" / "design.md").read_text()
    (tmp_path / "pgrpo" / "step" / "new_part.py").rename(tmp_path / "pgrpo" / "records" / "new_part.py")
    assert not fresh()
    indexes.write(tmp_path, ("modules",))
    (tmp_path / "pgrpo" / "records" / "new_part.py").unlink()
    assert not fresh()
    indexes.write(tmp_path, ("modules",))
    assert (tmp_path / "docs" / "design.md").read_text() == (REPO / "docs" / "design.md").read_text()


FINDING = re.compile(r"([+−-]?\d+\.\d+) \[([+−-]?\d+\.\d+), ([+−-]?\d+\.\d+)\]")  # a figure with its interval


def same_figure(text: str) -> str:
    """A figure as the report prints it and as prose writes it alike: no plus sign, an ASCII minus."""
    return text.replace("−", "-").replace("+", "")


def test_every_readme_finding_is_a_figure_of_a_generated_confirmatory_table():
    readme = text(REPO / "README.md")
    findings = readme.split("## What we found", 1)[1].split("\n## ", 1)[0]
    bullets = [line for line in findings.splitlines() if line.startswith("- ")]
    assert 0 < len(bullets) <= 6, "the README's findings are at most six one-line bullets"
    tables = " ".join(same_figure(path.read_text())
                      for path in sorted((REPO / "docs" / "bench").glob("confirmatory*/stage*/*.md")))
    for bullet in bullets:
        figures = FINDING.findall(bullet)
        assert figures, f"a finding without a figure and its interval: {bullet}"
        for value, low, high in figures:
            figure = same_figure(f"{value} [{low}, {high}]")
            assert figure in tables, f"{figure} (README: {bullet[:60]}...) is in no generated confirmatory table"
