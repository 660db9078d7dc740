"""``python -m earm_jax.cli``: the ``earm`` command run by a given Python, so a
caller that knows its interpreter (``sys.executable``) needs no ``earm`` on
PATH and no activated venv."""

from earm_jax.cli.main import main

if __name__ == "__main__":
    main()
