"""The commands storey: one module per `pgrpo <command>`, each a typed function whose docstring is its `--help`.

They sit on the library (pgrpo/) and nothing in the library imports them (tests/test_imports.py)."""
