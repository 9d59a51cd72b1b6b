"""Classic Kafka Streams members inside KIP-1071 streams groups, and the migration gateway built on it."""
