"""mkdocs hook: a page's `<!-- generated: NAME -->` line becomes the table NAME, computed from the code when the
docs are built, so that no page restates a docstring by hand (mkdocs.yml: hooks)."""

from pgrpo.interventions.catalog import knob_table

TABLES = {"intervention knobs": knob_table}


def on_page_markdown(markdown: str, **_) -> str:
    for name, table in TABLES.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, table())
    return markdown
