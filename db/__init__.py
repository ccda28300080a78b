"""The results store: SQLAlchemy models, schema migration and keyword-only queries."""

from db.engine import Store, default_url, open_store
from db.queries import MeasurementRow

__all__ = ["MeasurementRow", "Store", "default_url", "open_store"]
