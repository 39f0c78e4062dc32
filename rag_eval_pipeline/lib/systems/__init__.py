"""The system under test: the batch protocol, the reference system, replay, the HTTP client."""
