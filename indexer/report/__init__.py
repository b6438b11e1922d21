"""Renderings of a reconciliation report: terminal summary, JSON, one-file HTML."""
