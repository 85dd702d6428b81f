"""The docs' indexes of the tree, written into the pages and checked, never kept by hand: every config file by folder
(docs/configs.md; tests/test_configs.py checks it) and every module by subpackage (docs/design.md; tests/test_docs.py
checks it), each with the first sentence its file opens with (a config's header comment, a module's docstring).

After adding, moving or removing a config or a module, or rewording the sentence one opens with, rewrite both:

    python docs/hooks/indexes.py

Each index sits in its page between a begin and an end marker (HTML comments, which neither reader shows); only
what is between them is rewritten. Standard library only: it runs before any set-up.
"""

import ast
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WIDTH = 120  # the repository's line length
COMMAND = "python docs/hooks/indexes.py"
# a sentence ends at ". ", "? " or "! ", not after an abbreviation
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bet al)(?<!\bvs)(?<!\bcf)([.?!])\s")


def first_sentence(text: str) -> str:
    """The first sentence of a text's first paragraph, on one line (a closing full stop dropped)."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = SENTENCE_END.search(paragraph)
    sentence = paragraph[:end.start() + (end.group(1) != ".")] if end else paragraph
    return sentence.removesuffix(".")


def item(name: str, sentence: str) -> list[str]:
    """One list item, wrapped to the line length (a continuation indented under the item)."""
    return textwrap.wrap(f"- `{name}`: {sentence}" if sentence else f"- `{name}`", WIDTH, subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)


def header_sentence(config: Path) -> str:
    """A config's first sentence: its opening comment lines, up to the first empty one."""
    lines = []
    for line in config.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        lines.append(line[1:].strip())
    return first_sentence("\n".join(lines))


def config_index(repo: Path = REPO) -> str:
    """Every file under configs/, by folder (the top first), each with its header's first sentence."""
    configs = repo / "configs"
    folders = sorted({path.parent for path in configs.rglob("*.yaml")}, key=lambda f: (f != configs, f))
    out: list[str] = []
    for folder in folders:
        out += [f"**`{folder.relative_to(repo)}/`**", ""]
        for path in sorted(folder.glob("*.yaml")):
            out += item(str(path.relative_to(repo)), header_sentence(path))
        out.append("")
    return "\n".join(out).rstrip("\n")


def docstring_sentence(module: Path) -> str:
    return first_sentence(ast.get_docstring(ast.parse(module.read_text(encoding="utf-8"))) or "")


def module_index(repo: Path = REPO) -> str:
    """The package's modules by subpackage (pgrpo/ itself first), each with its docstring's first sentence; a
    subpackage's line is its __init__.py's."""
    out: list[str] = []

    def walk(package: Path) -> None:
        summary = docstring_sentence(package / "__init__.py")
        out.extend(textwrap.wrap(f"**`{package.relative_to(repo)}/`**" + (f": {summary}" if summary else ""), WIDTH,
                                 break_long_words=False, break_on_hyphens=False))
        out.append("")
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py":
                out.extend(item(module.name, docstring_sentence(module)))
        out.append("")
        for sub in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
            walk(sub)

    walk(repo / "pgrpo")
    return "\n".join(out).rstrip("\n")


INDEXES: dict[str, tuple[str, Callable[[Path], str]]] = {
    "configs": ("docs/configs.md", config_index),
    "modules": ("docs/design.md", module_index),
}


def begin(name: str) -> str:
    return f"<!-- index of {name}: `{COMMAND}` writes it, up to its end marker -->"


def end(name: str) -> str:
    return f"<!-- end of the index of {name} -->"


def span(name: str, text: str, page: str) -> tuple[int, int]:
    """Where the index sits in its page's text: from the end of its begin marker to the start of its end marker."""
    start, stop = text.find(begin(name)), text.find(end(name))
    if start < 0 or stop < start:
        raise ValueError(f"{page} has no markers for the index of {name}: {begin(name)!r}, then {end(name)!r}, "
                         f"each on a line of its own")
    return start + len(begin(name)), stop


def in_page(name: str, repo: Path = REPO) -> str:
    """The index as its page holds it, between its markers."""
    page = INDEXES[name][0]
    text = (repo / page).read_text(encoding="utf-8")
    start, stop = span(name, text, page)
    return text[start:stop].strip("\n")


def stale(repo: Path = REPO) -> list[str]:
    """The indexes whose page does not hold what the tree gives, each named with its page."""
    return [f"the index of {name} in {page}" for name, (page, make) in INDEXES.items()
            if in_page(name, repo) != make(repo)]


def write(repo: Path = REPO, names: tuple[str, ...] = tuple(INDEXES)) -> list[str]:
    """Rewrite each index (of `names`) in its page; the pages that changed."""
    changed = []
    for name in names:
        page, make = INDEXES[name]
        fresh = make(repo)
        if in_page(name, repo) != fresh:
            text = (repo / page).read_text(encoding="utf-8")
            start, stop = span(name, text, page)
            (repo / page).write_text(f"{text[:start]}\n{fresh}\n{text[stop:]}", encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    changed = write(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO)
    print(f"rewrote {', '.join(changed)}" if changed else "the indexes are up to date")
