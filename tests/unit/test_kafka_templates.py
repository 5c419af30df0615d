"""The Kafka response consumer reads each queue's correlation template from the
queue's stored settings (the store keeps them as JSON, no pydantic model)."""

from __future__ import annotations

from datetime import UTC, datetime

from hipq.config import CorrelationConfig, KafkaConfig, QueueConfig
from hipq.responses.kafka_consumer import KafkaResponseConsumer
from hipq.store import open_store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_templates_come_from_the_stored_settings() -> None:
    store = await open_store("memory://")
    try:
        for raw in ({"id": "by-template", "correlation": {"response": "{value.order}"}},
                    {"id": "by-plugin",
                     "correlation": {"plugin": "hipq.contrib.correlations:order_key"}},
                    {"id": "request-only", "correlation": {"request": "{data.order}"}},
                    {"id": "none"}):
            await store.queue_upsert(QueueConfig.model_validate(raw).stored(), now=NOW)
        consumer = KafkaResponseConsumer(KafkaConfig(bootstrap_servers="127.0.0.1:9"), store)
        assert await consumer._refresh_templates(force=True)
        assert consumer.parser.correlations == {
            "by-plugin": CorrelationConfig(plugin="hipq.contrib.correlations:order_key"),
            "by-template": CorrelationConfig(response="{value.order}")}
    finally:
        await store.close()
