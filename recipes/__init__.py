"""Recipes: how the repository's shipped models were made, kept out of the ``pyelmo`` library."""
