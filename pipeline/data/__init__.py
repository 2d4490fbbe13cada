"""Data."""
