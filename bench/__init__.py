"""Benchmarks: run by hand (`python -m bench.NAME`) or all together (`make bench`), never by pytest."""
