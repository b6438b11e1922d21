"""aiokafka consumer with explicit commits and a rebalance hook, and the dead-letter producer."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.structs import ConsumerRecord, TopicPartition
from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_random_exponential

from indexer.errors import ConfigError, KafkaUnavailable
from indexer.outages import Outage
from indexer.security import tls_context
from indexer.settings import KafkaSettings

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
RevokeHook = Callable[[set[TopicPartition]], Awaitable[None]]
# What to check when a table's topic does not exist.
TOPIC_HINT = ("Debezium writes a table's topic with its first change, none for an empty table; "
              "else check the connector's table.include.list and topic.prefix")
# A table's topic appears with its first change; notice it within 30 s rather than 5 min.
METADATA_MAX_AGE_MS = 30_000
# How long the reader's fetch waits when there is nothing to read; bounds how late it stops.
READ_POLL_MS = 500
# A send Kafka refused is tried again after about this long, doubling up to the ceiling.
RETRY_FIRST_WAIT_S = 0.1
# While Kafka is away and nothing arrives, whether it is back is asked this often.
PROBE_S = 5.0
# aiokafka's loggers. While a broker is away each connection attempt, metadata refresh, fetch,
# heartbeat and commit that fails is a WARNING or ERROR line of its own (~540 per broker
# restart, up to 70 a second): the consumer's outage tells it once instead.
AIOKAFKA_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.cluster", "aiokafka.admin.client",
                    "aiokafka.consumer.consumer", "aiokafka.consumer.fetcher",
                    "aiokafka.consumer.group_coordinator", "aiokafka.producer.producer",
                    "aiokafka.producer.sender")
# What says a broker cannot be reached now (as opposed to a topic not there yet, a rebalance).
_UNREACHABLE = re.compile(r"unable (?:to )?(?:connect|update metadata|request metadata)|"
                          r"failed fetch|cannot send|could not send|connection|not ?ready|"
                          r"timed ?out|coordinator|heartbeat (?:send|session)", re.IGNORECASE)
# What is wrong for good, or a bug: said as aiokafka says it.
_KEPT = re.compile(r"not authorized|unexpected|sasl|fatal|unrecognized", re.IGNORECASE)


class LibraryErrors(logging.Filter):
    """aiokafka's own warnings and errors: DEBUG lines, those saying a broker cannot be
    reached told to the Kafka :class:`~indexer.outages.Outage`; those that say something is
    wrong for good (authorization, a bug) kept as they are."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self._outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        text = record.getMessage()
        if _KEPT.search(text):
            return True
        if _UNREACHABLE.search(text):
            self._outage.failed(text)
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


@contextlib.contextmanager
def library_errors_told(outage: Outage) -> Iterator[None]:
    """aiokafka's errors go to ``outage`` (and DEBUG) while the block runs."""
    quiet = LibraryErrors(outage)
    loggers = [logging.getLogger(name) for name in AIOKAFKA_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def client_security(settings: KafkaSettings) -> dict[str, Any]:
    """aiokafka's security arguments, the same for the consumer, producers and admin clients."""
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.tls:
        if not settings.verify_certs:
            log.warning("TLS certificates of the Kafka brokers are NOT verified "
                        "(kafka.verify_certs = false)")
        try:
            options["ssl_context"] = tls_context(
                ca_file=settings.ca_file, cert_file=settings.cert_file,
                key_file=settings.key_file, key_password=settings.key_password,
                verify=settings.verify_certs)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"kafka: cannot load the TLS files (ca_file, cert_file, "
                              f"key_file): {exc}") from exc
    if settings.sasl:
        options["sasl_mechanism"] = settings.sasl_mechanism
        if settings.sasl_mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = _token_provider(settings)
        else:
            assert settings.sasl_password is not None
            options["sasl_plain_username"] = settings.sasl_username
            options["sasl_plain_password"] = settings.sasl_password.reveal()
    return options


async def probe(settings: KafkaSettings) -> None:
    """Connects to a bootstrap broker once, to say in one line what is wrong when it refuses:
    aiokafka's own start only logs the cause and raises "Unable to bootstrap"."""
    failures: list[str] = []
    for address in settings.bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            conn = await create_conn(host, int(port), request_timeout_ms=10_000,
                                     client_id=settings.client_id, **client_security(settings))
        except SaslAuthenticationFailed as exc:
            raise ConfigError(f"kafka {address} refused user {settings.sasl_username!r} "
                              f"({settings.sasl_mechanism}: {_reason(exc)}): check "
                              "kafka.sasl_username and kafka.sasl_password (or "
                              "sasl_password_file)") from exc
        except UnsupportedSaslMechanismError as exc:
            raise ConfigError(f"kafka {address} does not accept {settings.sasl_mechanism} "
                              f"({_reason(exc)}): check kafka.sasl_mechanism") from exc
        except ssl.SSLCertVerificationError as exc:
            raise ConfigError(f"kafka {address}: TLS certificate not trusted "
                              f"({exc.verify_message}): set kafka.ca_file to the CA that "
                              "signed it") from exc
        except ssl.SSLError as exc:
            if "WRONG_VERSION_NUMBER" in str(exc):
                raise ConfigError(f"kafka {address} does not speak TLS: use "
                                  "kafka.security_protocol PLAINTEXT or SASL_PLAINTEXT") from exc
            raise ConfigError(f"kafka {address}: TLS failed ({exc}); check "
                              "kafka.security_protocol and kafka.ca_file") from exc
        except ConnectionResetError as exc:
            if settings.tls:  # a plain-text listener drops what looks like noise to it
                raise ConfigError(
                    f"kafka {address} reset the connection during the TLS handshake: check "
                    f"kafka.security_protocol ({settings.security_protocol}) against the "
                    "broker's listener (PLAINTEXT, SASL_PLAINTEXT, ...)") from exc
            failures.append(f"{address}: connection reset")
            continue
        except KafkaConnectionError as exc:
            if "closed" in str(exc):
                raise ConfigError(
                    f"kafka {address} closed the connection during the handshake: check "
                    f"kafka.security_protocol ({settings.security_protocol}) against the "
                    "broker's listener (SSL, SASL_SSL, ...)") from exc
            failures.append(f"{address}: {exc}")
            continue
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {exc}")
            continue
        conn.close()
        return
    raise KafkaUnavailable(f"kafka is not reachable ({'; '.join(failures)}); check "
                           "kafka.bootstrap_servers")


def _reason(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1]


def _token_provider(settings: KafkaSettings) -> Any:
    """Calls the configured ``module:factory`` for an OAUTHBEARER token provider."""
    spec = settings.sasl_oauth_token_provider or ""
    module_name, _, attribute = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
        return factory()
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"kafka.sasl_oauth_token_provider: cannot load {spec!r} "
                          f"({type(exc).__name__}: {exc}); expected 'module:factory'") from exc


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoked: RevokeHook) -> None:
        self._on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            log.info("partitions revoked: %s", sorted(map(str, revoked)))
            await self._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("partitions assigned: %s", sorted(map(str, assigned)))


def topics_pattern(topics: Sequence[str]) -> str:
    """A regular expression that matches exactly these topics."""
    return "^(?:" + "|".join(re.escape(t) for t in sorted(topics)) + ")$"


class KafkaSource:
    """Subscribes to the tables' topics; commits only offsets it is given.

    aiokafka sends the next fetch for a partition only once everything fetched for it has
    been taken, so a consumer that takes records as it decodes them waits a full fetch round
    trip every few thousand records. A reader task takes each fetch whole as it arrives and
    hands it over in slices: the next fetch travels while this one is decoded. At most one
    fetch waits in the hand-over, so memory stays bounded by a few fetches whatever the
    backlog. Prefetched records of a generation ended by a rebalance are dropped: the new
    owner of each partition reads it again from its last commit.
    """

    def __init__(self, settings: KafkaSettings, topics: Sequence[str],
                 on_revoked: RevokeHook, outage: Outage | None = None) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._on_revoked = on_revoked
        self.outage = outage or Outage("Kafka", "consuming and offset commits")
        self._told = contextlib.ExitStack()
        self._consumer: AIOKafkaConsumer | None = None
        self._fetched: asyncio.Queue[tuple[int, Records] | BaseException] = asyncio.Queue(1)
        self._generation = 0  # bumped by every rebalance
        self._current: list[tuple[TopicPartition, list[ConsumerRecord[bytes, bytes]]]] = []
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> KafkaSource:
        s = self._settings
        await probe(s)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset=s.auto_offset_reset,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
            fetch_max_bytes=s.fetch_max_bytes,
            check_crcs=s.check_crcs,
            isolation_level="read_committed",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **client_security(s),
        )
        # By pattern, not by name: asking the broker for a topic by name creates it when
        # auto.create.topics.enable is on (a misspelt table would get an empty topic, and a
        # table's real topic the wrong partition count). A topic that appears later is
        # picked up at the next metadata refresh.
        self._consumer.subscribe(pattern=topics_pattern(self._topics),
                                 listener=_Listener(self._revoked))
        self._told.enter_context(library_errors_told(self.outage))
        try:
            await self._consumer.start()
        except BaseException:
            self._told.close()
            raise
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            if self._consumer is not None:
                await self._consumer.stop()
        finally:
            self._told.close()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "use the source as an async context manager"
        return self._consumer

    async def _read(self) -> None:
        consumer = self.consumer
        probed = 0.0
        try:
            while True:
                records = await consumer.getmany(timeout_ms=READ_POLL_MS)
                if records:
                    self.outage.ok()
                    await self._fetched.put((self._generation, records))
                elif self.outage.down and time.monotonic() - probed >= PROBE_S:
                    probed = time.monotonic()  # nothing to read: is it back?
                    with contextlib.suppress(KafkaError):
                        await consumer.topics()
                        self.outage.ok()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the next fetch(), which raises it
            await self._fetched.put(exc)

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        self._generation += 1
        self._current = []
        await self._on_revoked(revoked)

    async def fetch(self, max_records: int, timeout_ms: int) -> Records:
        """Up to ``max_records`` records in partition order, waiting at most ``timeout_ms``
        when none are fetched yet."""
        while not self._current:  # a rebalance empties it
            try:
                if timeout_ms <= 0:
                    fetched = self._fetched.get_nowait()
                else:
                    async with asyncio.timeout(timeout_ms / 1000):
                        fetched = await self._fetched.get()
            except (asyncio.QueueEmpty, TimeoutError):
                return {}
            if isinstance(fetched, BaseException):
                raise fetched
            generation, records = fetched
            if generation == self._generation:  # else fetched before a rebalance: dropped
                self._current = [(tp, batch) for tp, batch in records.items() if batch]
                self._current.reverse()  # taken from the end
        result: Records = {}
        while self._current and max_records > 0:
            tp, batch = self._current[-1]
            if len(batch) <= max_records:
                self._current.pop()
                result[tp] = batch
            else:
                result[tp], self._current[-1] = batch[:max_records], (tp, batch[max_records:])
            max_records -= len(result[tp])
        return result

    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def topics(self) -> set[str]:
        """The tables' topics that exist (the subscription's pattern matched them)."""
        return set(self.consumer.subscription())

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commits ``{tp: next offset to read}`` for the partitions still assigned."""
        assigned = self.assignment()
        owned = {tp: offset for tp, offset in offsets.items() if tp in assigned}
        if owned:
            try:
                await self.consumer.commit(owned)
            except KafkaError as exc:
                if exc.retriable:
                    self.outage.failed(exc)
                raise
            self.outage.ok()

    def lag(self, tp: TopicPartition, next_offset: int) -> int | None:
        highwater = self.consumer.highwater(tp)
        return None if highwater is None else max(0, highwater - next_offset)


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
        async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Exception), stop=stop_never, reraise=True,
                wait=wait_random_exponential(multiplier=RETRY_FIRST_WAIT_S, max=max_backoff_s),
                before_sleep=lambda state: self.outage.failed(
                    state.outcome.exception() if state.outcome else "no answer")):
            with attempt:
                await self.send(topic, key, value, headers)
        self.outage.ok()


@contextlib.asynccontextmanager
async def admin_client(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client for one short task, closed after it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers,
                                **client_security(settings))
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[int]:
    """The partition numbers of a topic; empty when it does not exist."""
    async with admin_client(settings) as admin:
        return await partition_numbers(admin, topic)


async def missing_topics(settings: KafkaSettings, topics: Sequence[str]) -> list[str]:
    """Those of the topics that do not exist (listed, never asked for by name)."""
    async with admin_client(settings) as admin:
        existing = set(await admin.list_topics())
    return [t for t in topics if t not in existing]


async def partition_numbers(admin: AIOKafkaAdminClient, topic: str) -> list[int]:
    """The partition numbers of a topic; empty when it does not exist. Asked for by name, a
    missing topic would be created where brokers auto-create topics: only listed ones are."""
    if topic not in await admin.list_topics():
        return []
    (description,) = await admin.describe_topics([topic])
    if description.get("error_code"):
        return []
    return sorted(int(p["partition"]) for p in description.get("partitions", []))
