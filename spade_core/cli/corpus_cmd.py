"""``spade corpus``: build a Parquet corpus from a folder of text files."""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import clean_errors
from spade_core.designer.corpus import build_corpus

corpus_app = typer.Typer(help="Document corpora for the designer.", no_args_is_help=True)


@corpus_app.command("build")
@clean_errors
def build(
    folder: Annotated[str, typer.Argument(help="Folder of .txt/.md files (searched recursively).")],
    out: Annotated[str, typer.Argument(help="Parquet file to write (columns title, text).")],
) -> None:
    """Collect the .txt and .md files under FOLDER into the Parquet corpus OUT.

    Then use it with --set corpus.source=OUT.
    """
    rows = build_corpus(folder, out)
    typer.echo(f"wrote {rows} documents to {out}")
