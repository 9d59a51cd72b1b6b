"""A KIP-924 assignor that answers with fixed targets: the worked example of the migration section of
KIP-1071 (process id -> tasks per role), so compat can be checked step by step against it."""

from __future__ import annotations

from kprotocol.assignor import ApplicationState, KafkaStreamsAssignment, TaskAssignment

TARGETS: dict[str, dict[str, list[str]]] = {}


class FixedAssignor:
    def assign(self, application_state: ApplicationState) -> TaskAssignment:
        return TaskAssignment(tuple(
            KafkaStreamsAssignment(pid, tuple(TARGETS.get(pid, {}).get("active", ())),
                                   tuple(TARGETS.get(pid, {}).get("standby", ())),
                                   tuple(TARGETS.get(pid, {}).get("warmup", ())))
            for pid in application_state.kafka_streams_states))
