"""Command-line tools built on the library."""
