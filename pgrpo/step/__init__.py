"""One GRPO step, with no trainer around it: sample (generation.py, vllm_engine.py) → pack the rows (rollout.py,
batch.py) → the loss (loss.py) → one backward that keeps each row's knob gradient (step_grads.py) → measure and
edit it along V (projection.py) → the optimizer (optim.py). Both hosts (`pgrpo.hosts`) run it."""
