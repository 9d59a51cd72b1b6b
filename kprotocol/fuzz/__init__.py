"""Fuzzing helpers: hypothesis strategies that build any message at any version."""
