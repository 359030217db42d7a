"""``attnlab ablate``: re-run a paper's ablation table as configurations of the library's recipes.

attnlab ablate --list                                   # the tables, their rows and probes
attnlab ablate all --plan                               # the runs still to do, and their minutes
attnlab ablate bert-table8                              # one table in its default budget (about an hour)
attnlab ablate roberta-table1 --minutes 15 --seeds 0 1 2 --output runs/ablations
attnlab ablate all --output runs/ablations --docs docs/ablations   # every table, resumable
attnlab ablate --compare docs/ablations docs/ablations/books       # two runs' verdicts side by side
attnlab ablate my-table.yaml                                       # a table of one's own (table_file)

Every run is cached under OUTPUT/runs by its configuration and seed: a second invocation trains nothing
it has, a killed one continues, and a row two tables share is trained once. Outputs: OUTPUT/TABLE.md,
OUTPUT/TABLE.json and OUTPUT/TABLE.png (with --docs, the same in that folder and the summary page beside it).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.cli.args import non_negative_int, positive_float

if TYPE_CHECKING:
    from attnlab.ablation.lab import TableEstimate
    from attnlab.ablation.settings import LabSettings
    from attnlab.ablation.table import Table

DEFAULT_DATA = os.environ.get("ATTNLAB_DATA", "../shared/data")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ablate",
        help="re-run a paper's ablation table (BERT, RoBERTa, ALBERT, DistilBERT, the Transformer, ELECTRA, "
        "SpanBERT) on small models, with its noise measured over seeds",
        description="Train every row of TABLE (a configuration of the library's recipes) for each seed, "
        "score it with the table's probes, and write TABLE.md/.json/.png: the paper's numbers beside the "
        "measured means and spreads, and each of the paper's pairwise orderings judged agrees, disagrees "
        "or not separated (a measured difference within twice its standard error).",
    )
    p.add_argument(
        "table", nargs="?",
        help="a table name (see --list), 'all', or a table of one's own in a .yaml or .json file "
        "(attnlab.ablation.table_file)",
    )  # fmt: skip
    p.add_argument("--list", action="store_true", help="list the tables and exit")
    p.add_argument(
        "--plan", action="store_true",
        help="print the runs each table needs, those already done and the minutes the rest should take, "
        "and exit (trains and writes nothing)",
    )  # fmt: skip
    p.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), default=None,
        help="print, for every table written to both folders A and B, each run's separated and agreeing "
        "orderings and how many verdicts are the same, and exit",
    )  # fmt: skip
    p.add_argument(
        "--minutes", type=positive_float, default=None,
        help="the whole table's budget, divided over its runs (default: the standard budget "
        "of every run, the same in every table, so that shared rows are trained once; about an hour a table "
        "on 2 CPU cores)",
    )  # fmt: skip
    p.add_argument(
        "--seeds",
        type=non_negative_int,
        nargs="+",
        default=[0, 1, 2],
        help="seeds of each row (pre-training and fine-tuning alike); at least 2 measure noise",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda, cuda:N or auto; on a GPU the lab trains at larger sizes (attnlab.ablation.settings)",
    )
    p.add_argument("--output", default="runs/ablations", help="runs, data and the tables' outputs")
    p.add_argument("--docs", default=None, help="also write the docs-ready tables into this folder")
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA,
        help="the shared data (glue/SST-2, conll2003, multi30k; default $ATTNLAB_DATA or %(default)s)",
    )
    p.add_argument(
        "--corpus",
        nargs="+",
        default=None,
        help="pre-training corpus files (default: the built-in stdlib docstrings)",
    )
    p.add_argument("--format", default="sentences", help="the corpus format, as attnlab pretrain's --format")
    p.set_defaults(func=run_ablate)


def list_tables() -> str:
    from attnlab.ablation.tables import TABLES

    lines = []
    for t in TABLES.values():
        lines.append(f"{t.name:20s} {t.title} ({len(t.rows)} rows)")
        lines.append(f"{'':20s}   rows: {'; '.join(r.name for r in t.rows)}")
        lines.append(f"{'':20s}   probes: {', '.join(t.probes)}")
    return "\n".join(lines)


def run_ablate(args: argparse.Namespace) -> int:
    from attnlab.ablation import report
    from attnlab.ablation.compare import compare_folders, comparison_markdown
    from attnlab.ablation.lab import estimate_tables, run_table
    from attnlab.ablation.settings import LabSettings, size_for
    from attnlab.ablation.table_file import is_table_file

    if args.list:
        print(list_tables())
        return 0
    if args.compare:
        if args.table:
            raise ValueError(f"--compare reads two output folders and runs no table: drop {args.table!r}")
        a, b = args.compare
        print(comparison_markdown(compare_folders(Path(a), Path(b)), a, b))
        return 0
    if not args.table:
        raise ValueError("name a table (attnlab ablate --list shows them) or 'all'")
    settings = LabSettings(
        output=Path(args.output), data_dir=Path(args.data_dir), corpus=tuple(args.corpus or ()),
        corpus_format=args.format, seeds=tuple(dict.fromkeys(args.seeds)), device=args.device,
        minutes=args.minutes, size=size_for(args.device),
    )  # fmt: skip
    tables = _tables(args.table, settings)
    if not args.plan and not settings.data_dir.is_dir():  # planning reads none of it
        raise NotADirectoryError(
            f"--data-dir {settings.data_dir}: not a directory (glue/SST-2, conll2003, multi30k)"
        )
    if args.plan:
        print(plan_text(estimate_tables(tables, settings), settings))
        return 0
    table_file = args.table if is_table_file(args.table) else ""
    for table in tables:
        command = "attnlab ablate " + " ".join(
            shlex.quote(a) for a in [table_file or table.name, *_options(args)]
        )
        result = run_table(table, settings, command=command, table_file=table_file)
        written = report.write_table(result, settings.output)
        if args.docs:
            report.write_table(result, Path(args.docs))
        a = result.agreement
        print(f"{table.name}: {a.total} orderings, {a.counted} separated, {a.agreed} agree; "
              f"{result.seconds / 60:.1f} min; {written[0]}")  # fmt: skip
    if args.docs:  # the page beside the folder (docs/ablations.md for docs/ablations) collects them all
        docs = Path(args.docs)
        report.update_summary(docs.parent / f"{docs.name}.md", docs)
    sys.stdout.flush()
    return 0


def _tables(name: str, settings: LabSettings) -> list[Table]:
    """The tables ``name`` names: one of the lab's, all of them, or a table file's (read at its sizes)."""
    from attnlab.ablation.table_file import is_table_file, load_table
    from attnlab.ablation.tables import TABLES, get_table

    if name == "all":
        return list(TABLES.values())
    return [load_table(name, settings)] if is_table_file(name) else [get_table(name)]


def plan_text(estimates: list[TableEstimate], settings: LabSettings) -> str:
    """`--plan`'s lines: the sizes, a table a line, then the sum where there are several."""
    from attnlab.ablation.plan import MIN_RUN_MINUTES

    units = {f"{e.run_minutes:.2f}" for e in estimates}
    unit = f"; {units.pop()} min a pre-training run" if len(units) == 1 else ""
    lines = [f"sizes ({settings.size.name}): {settings.size.describe()}{unit}; output {settings.output}"]
    for e in estimates:
        todo = ", ".join(f"{n} {kind}" for kind, n in e.pending.items()) or "nothing"
        shared = f", {e.shared} trained by an earlier table" if e.shared else ""
        blocked = f"; {e.blocked} left out (a run they need failed)" if e.blocked else ""
        table_unit = "" if unit else f" ({e.run_minutes:.2f} min a pre-training run)"
        floored = settings.minutes is not None and e.run_minutes <= MIN_RUN_MINUTES
        note = f" (over --minutes: the runs' fixed allowance is {e.allowance:.0f} min)" if floored else ""
        lines.append(f"{e.table:20s} {e.runs} runs: {e.done} done{shared}; to run: {todo}{blocked}; "
                     f"about {_duration(e.minutes)}{table_unit}{note}")  # fmt: skip
    if len(estimates) > 1:
        runs = sum(sum(e.pending.values()) for e in estimates)
        lines.append(f"{'all':20s} {runs} runs to run, about {_duration(sum(e.minutes for e in estimates))}")
    return "\n".join(lines)


def _duration(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def _options(args: argparse.Namespace) -> list[str]:
    """The options as given, for the command line written into each table's output."""
    out = []
    if args.minutes is not None:
        out += ["--minutes", f"{args.minutes:g}"]
    if list(args.seeds) != [0, 1, 2]:
        out += ["--seeds", *map(str, args.seeds)]
    if args.device != "cpu":
        out += ["--device", args.device]
    if args.corpus:
        out += ["--corpus", *args.corpus, "--format", args.format]
    if args.data_dir != DEFAULT_DATA:
        out += ["--data-dir", args.data_dir]
    if args.output != "runs/ablations":
        out += ["--output", args.output]
    if args.docs:
        out += ["--docs", args.docs]
    return out
