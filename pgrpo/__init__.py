"""pgrpo: projected GRPO against reward hacking, on PyTorch Lightning."""

__version__ = "0.1.0"
