"""Fixtures for every test: PostgreSQL (tests/fixtures/postgres.py) and Temporal (temporal.py)."""

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.temporal"]
