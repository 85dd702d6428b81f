"""The `pgrpo` console script: `pgrpo fit ...` goes to LightningCLI, any other `pgrpo <command> ...` to that command.

Each command is one typed function in pgrpo/commands/, its docstring its `--help`; the library below
(pgrpo/) never imports a command.
"""

import importlib
import inspect
import logging
import sys
import warnings
from pathlib import Path

import transformers
from jsonargparse import CLI, set_parsing_settings

# `pgrpo X` runs module:function, imported only when asked for (`pgrpo report` need not load torch's world)
TOOLS = {
    "selfcheck": "pgrpo.commands.selfcheck:selfcheck", "build-pool": "pgrpo.commands.build_pool:build_pool",
    "extract": "pgrpo.commands.extract:extract", "sweep": "pgrpo.commands.sweep:sweep",
    "report": "pgrpo.commands.report:report", "build-base": "pgrpo.commands.build_base:build_base",
    "export": "pgrpo.commands.export:export", "eval": "pgrpo.commands.eval:eval_checkpoint",
    "transfer": "pgrpo.commands.transfer:transfer", "bench": "benchmarks.bench:bench",
    "bench-sampling": "benchmarks.sampling:sampling",
    "prime": "pgrpo.commands.prime:prime", "measure-v": "pgrpo.commands.measure_v:measure_v",
    "disjoint": "pgrpo.commands.disjoint:disjoint",
}
# tools whose required arguments are positional (`pgrpo report LOGDIR`); the others take options only
POSITIONAL_TOOLS = {"report", "export"}
CLONE = Path(__file__).resolve().parents[1]


def tool(name: str):
    """The function behind `pgrpo NAME`."""
    module, function = TOOLS[name].split(":")
    if module.startswith("benchmarks."):
        if not (CLONE / "benchmarks").is_dir():
            sys.exit(f"pgrpo {name}: the benchmark harness lives in a clone's benchmarks/ and is not installed with "
                     f"the package; run it from a clone (pip install -e .)")
        if str(CLONE) not in sys.path:
            sys.path.insert(0, str(CLONE))
    return getattr(importlib.import_module(module), function)


def underscored_options(args: list[str]) -> list[str]:
    """`--from-model X` means `--from_model X`: a tool's options are its parameters' names, either spelling."""
    out = []
    for arg in args:
        if arg.startswith("--") and not arg.startswith("---"):
            name, eq, value = arg[2:].partition("=")
            arg = f"--{name.replace('-', '_')}{eq}{value}"
        out.append(arg)
    return out


def bare_flags_to_true(tool, args: list[str]) -> list[str]:
    """`--json` alone means `--json true` for a tool's bool parameters (jsonargparse wants the value)."""
    flags = {f"--{name}" for name, p in inspect.signature(tool).parameters.items() if p.annotation in (bool, "bool")}
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg in flags and (i + 1 == len(args) or args[i + 1].startswith("--")):
            out.append("true")
    return out


def _no_advert(record: logging.LogRecord) -> bool:
    return "litlogger" not in record.getMessage()


def main(argv: list[str] | None = None) -> None:
    # each config dataclass field's own docstring becomes its --help line (as litgpt does)
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    # a run's terminal says what pgrpo builds and how training goes: no bar per checkpoint load or save, and
    # not Lightning's internal deprecation notice (lightning 2.6 on torch 2.13) on every fit
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # nor Lightning's advert for its cloud logger (lightning 2.6, every fit); its other notices stay
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_no_advert)
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in TOOLS:
        name, command = args[0], tool(args[0])
        CLI(command, args=bare_flags_to_true(command, underscored_options(args[1:])),
            as_positional=name in POSITIONAL_TOOLS)
        return
    from pgrpo.commands.fit import fit

    fit(argv, other_commands=tuple(TOOLS))


if __name__ == "__main__":
    main()
