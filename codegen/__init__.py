"""Generate `kprotocol.generated` from Kafka JSON message specs (`python -m codegen`)."""
