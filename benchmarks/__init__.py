"""The benchmark harness (`pgrpo bench`, `make bench`): run from a clone, not shipped in the installed package."""
