"""Entry points for ``ray job submit -- python -m jobs.<name> …``."""
