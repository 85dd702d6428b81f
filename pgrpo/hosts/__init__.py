"""The hosts that run the step: `lightning/` (`pgrpo fit`'s LightningModule, data, callbacks) and `trl.py` (TRL's
GRPOTrainer), with `monitor.py`, a callback that only measures, for any GRPO run. Glue only: what a step computes lives in `pgrpo.step`, what it does against hacking in
`pgrpo.interventions`."""
