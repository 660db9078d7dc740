"""The jobs behind the CLI and the notebooks: the simulation study, the LoCoMo
evaluation, their figures and their provenance. Parsing and printing live in
:mod:`earm_jax.cli`, which imports these; nothing here imports the CLI.
"""
