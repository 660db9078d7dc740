"""The ``earm`` command line (Typer). Host side: never imported by the core."""
