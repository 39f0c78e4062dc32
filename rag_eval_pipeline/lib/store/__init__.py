"""Where results live: the run store (Parquet), the warehouse (DuckDB), table schemas, SQL."""
