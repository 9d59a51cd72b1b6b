"""Fuzzing helpers: hypothesis strategies for every message and malformed-input mutations."""
