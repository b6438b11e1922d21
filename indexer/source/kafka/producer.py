"""An idempotent producer for dead letters and their replay."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from aiokafka import AIOKafkaProducer

from indexer.outages import Outage
from indexer.settings import KafkaSettings
from indexer.source.kafka.clients import client_security, probe, retrying


class Producer:
    """An idempotent producer for dead letters and replays; every send waits for the ack."""

    def __init__(self, settings: KafkaSettings, outage: Outage | None = None) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self.outage = outage or Outage("Kafka", "dead letters")

    async def __aenter__(self) -> Producer:
        await probe(self._settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.bootstrap_servers,
            client_id=f"{self._settings.client_id}-producer",
            acks="all",
            enable_idempotence=True,
            max_request_size=16 * 1024 * 1024,
            **client_security(self._settings),
        )
        await self._producer.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes]], partition: int | None = None) -> None:
        assert self._producer is not None, "use the producer as an async context manager"
        await self._producer.send_and_wait(topic, value=value, key=key, headers=list(headers),
                                           partition=partition)

    async def deliver(self, topic: str, key: bytes | None, value: bytes | None,
                      headers: Sequence[tuple[str, bytes]], *, max_backoff_s: float) -> None:
        """Sends until Kafka has it (the dead-letter topic must never lose a message): the
        retry policy for Kafka, every failure tried again with growing waits."""
        async for attempt in retrying(max_backoff_s, before_sleep=lambda state: self.outage.failed(
                state.outcome.exception() if state.outcome else "no answer")):
            with attempt:
                await self.send(topic, key, value, headers)
        self.outage.ok()
