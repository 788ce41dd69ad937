"""The zoo's Hydra sweeper: `hydra/sweeper=zoo_optuna` (see zoo_optuna_sweeper.py and docs/search.md)."""
