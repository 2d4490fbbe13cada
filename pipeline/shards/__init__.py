"""Shards."""
