"""The former name of `kprotocol.coordinator_topics` (the records of Kafka's coordinator topics and their
replay): `import kprotocol.coordinator` and its submodules keep working, as the very same modules."""

from __future__ import annotations

import importlib
import sys

from kprotocol import coordinator_topics

for _name in ("decode", "lines", "record_types", "state"):
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"{coordinator_topics.__name__}.{_name}")
sys.modules[__name__] = coordinator_topics
