"""What a run leaves and reads back. cache.py keys every cached artefact by what sets its bytes; events.py reads a
run's scalars and its JSON records; summary.py a run's summary; provenance.py the code a run ran."""
