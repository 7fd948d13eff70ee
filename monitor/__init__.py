"""Search-quality monitoring."""
