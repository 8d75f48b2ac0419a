"""One module per model family (the Family, its tiny twin, its notes); models/families.py registers each.

Steps to add one: docs/internals.md, "Adding a model family"."""
