"""mkdocs hook: a report page whose runs are kept in results/ keeps no PNG in the repository; its figures.json says
which runs they are drawn from, and the build draws any that are missing (pgrpo/commands/report/figures.py)."""

from pathlib import Path

from pgrpo.commands.report.figures import FIGURES_FILE, figures_missing, redraw


def on_pre_build(config, **_) -> None:
    root = Path(config.config_file_path).parent  # a record's source is relative to the repository's root
    for record in sorted(Path(config.docs_dir).rglob(FIGURES_FILE)):
        if figures_missing(record.parent):
            print(f"drawing {record.parent.relative_to(root)}'s figures from {root}", flush=True)
            redraw(record.parent, root)
