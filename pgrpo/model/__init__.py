"""The model and its adapter. load.py loads any base (the embedded default, a checkpoint directory, a cached hub id,
a GGUF file via gguf_model.py and hf_compat.py); adapter.py attaches the SVD knobs δS and δS_hack; embedded.py and
pretrain.py build the embedded default; priming.py (with low_rank.py, substrate.py and primings/) primes a real
base to hack; checkpoint.py reads a run's checkpoint back as its adapted model."""
