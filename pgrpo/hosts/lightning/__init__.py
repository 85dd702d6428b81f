"""`pgrpo fit`'s host: the LightningModule (module.py) around the step engine, the data module that serves prompts
and the teacher pool (data.py), the callbacks that log, checkpoint and run the negative controls (callbacks.py),
the DDP/FSDP strategy (strategy.py) and the progress line (progress.py)."""
