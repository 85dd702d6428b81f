"""The hack directions and what reads hacks off a model. extraction.py computes V from contrastive pairs' gradients;
basis.py gets the run its V (from the cache or extraction); controls.py swaps in a placebo V (random, shuffled,
non-hack); calibration.py matches a placebo's strength to its method's; activations.py and detectors.py read
hacks off hidden states (a probe); transfer.py asks whether a detector built without a loophole mode flags it."""
