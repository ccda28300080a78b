"""The fleet fixtures (an SQLite store, then a PostgreSQL one) for the store's own tests."""

from tests.fleet.conftest import other_url, pg_url, store_url

__all__ = ["other_url", "pg_url", "store_url"]
