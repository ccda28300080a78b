"""The results store: SQLAlchemy models, schema migration and keyword-only queries.

- `models`, `migrations`, `engine`: the schema, its upgrades, opening a store;
- `location`, `urls`, `errors`: the default store's place, URLs checked and printed, a
  store unusable or read-only;
- `rows`: plain values (a measurement row, UTC times, column bounds);
- `keys`: device and problem ids; `find`: the find path's reads and writes;
- `reports`: listings; `prune`: deleting measurements; `claims`: who measures what;
  `bundles`: export and merge;
- `jobs`: the HTTP service's background jobs.
"""

from db.engine import Store, open_store
from db.location import default_url
from db.rows import MeasurementRow

__all__ = ["MeasurementRow", "Store", "default_url", "open_store"]
