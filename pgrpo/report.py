"""Read TensorBoard event files back into numbers (the report command builds on this)."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a run directory: tag -> [(step, value)] sorted by step.

    A resumed run writes a second event file into the same directory; events of
    all files are merged and, for a step logged twice, the later write wins.
    """
    run_dir = Path(run_dir)
    files = sorted(run_dir.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in {run_dir}")
    merged: dict[str, dict[int, float]] = {}
    for file in files:
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                merged.setdefault(tag, {})[event.step] = event.value
    return {tag: sorted(steps.items()) for tag, steps in merged.items()}
