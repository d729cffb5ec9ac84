"""Standalone repros of the failure catalog: each file runs as a script in a torch build (torch + ExecuTorch only)."""
