"""mkdocs hook: a page's `<!-- generated: NAME -->` line becomes the text NAME, computed from the code when the
docs are built, so that no page restates a docstring by hand (mkdocs.yml: hooks)."""

from pgrpo.interventions.catalog import knob_table

# the indexes of the tree (configs, modules) are written into the pages instead, and checked: docs/hooks/indexes.py
TEXTS = {"intervention knobs": knob_table}


def on_page_markdown(markdown: str, **_) -> str:
    for name, text in TEXTS.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, text())
    return markdown
