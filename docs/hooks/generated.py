"""mkdocs hook: a page's `<!-- generated: NAME -->` line becomes the text NAME, computed from the code when the
docs are built, so that no page restates a docstring by hand (mkdocs.yml: hooks)."""

import ast
from pathlib import Path

from pgrpo.interventions.catalog import knob_table

PACKAGE = Path(__file__).resolve().parents[2] / "pgrpo"


def layout() -> str:
    """The package's files, each with its module docstring's first sentence, as an indented tree."""
    lines = ["pgrpo/"]

    def walk(folder: Path, depth: int) -> None:
        for path in sorted(folder.iterdir(), key=lambda p: (p.is_dir(), p.name)):
            if path.is_dir() and (path / "__init__.py").is_file():
                lines.append(f"{'  ' * depth}{path.name + '/':18} {summary(path / '__init__.py')}")
                walk(path, depth + 1)
            elif path.suffix == ".py" and path.name != "__init__.py":
                lines.append(f"{'  ' * depth}{path.name:18} {summary(path)}")

    walk(PACKAGE, 1)
    return "\n".join(lines)


def summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".")


TEXTS = {"intervention knobs": knob_table, "layout": layout}


def on_page_markdown(markdown: str, **_) -> str:
    for name, text in TEXTS.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, text())
    return markdown
