"""Sample data installed with kprotocol, for `kprotocol demo` (the repository's fixtures link here):
a Kafka Streams member's session (`streams-session.{client,server}.bin`), a `__consumer_offsets`
segment (`consumer-offsets.log`) and a tcpdump capture of real clients (`clients.pcap`, broker port 60127)."""
