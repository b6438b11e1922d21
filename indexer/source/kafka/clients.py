"""Connecting to Kafka: the security arguments every client shares, a probe that says in one
line what a broker refuses, Kafka's retry policy, and admin clients for short tasks (the one
way every job and check opens one)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from tenacity import AsyncRetrying, RetryCallState

from indexer.errors import ConfigError, KafkaUnavailable
from indexer.retrying import forever
from indexer.security import tls_context
from indexer.settings import KafkaSettings

log = logging.getLogger(__name__)

# What to check when a table's topic does not exist.
TOPIC_HINT = ("Debezium writes a table's topic with its first change, none for an empty table; "
              "else check the connector's table.include.list and topic.prefix")
# A send Kafka refused is tried again after about this long, doubling up to the ceiling.
RETRY_FIRST_WAIT_S = 0.1


# What talking to Kafka can raise, whatever the failure (for ``except`` clauses above the
# adapter, which name no driver class).
FAILURES: tuple[type[Exception], ...] = (KafkaUnavailable, KafkaError, OSError)


def transient(exc: BaseException) -> bool:
    """Whether another try may succeed: no broker now, or one saying to try again."""
    return isinstance(exc, KafkaUnavailable | OSError) or (
        isinstance(exc, KafkaError) and bool(exc.retriable))


def retrying(max_backoff_s: float, *,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """Kafka's retry policy: every failure tried again, with growing jittered waits up to
    ``max_backoff_s`` (what is sent to Kafka must never be lost)."""
    return forever(lambda exc: isinstance(exc, Exception), first_wait_s=RETRY_FIRST_WAIT_S,
                   max_backoff_s=max_backoff_s, before_sleep=before_sleep)


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


@contextlib.asynccontextmanager
async def admin_client(settings: KafkaSettings, *,
                       timeout_ms: int | None = None) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client for one short task, closed after it (``timeout_ms``: its requests')."""
    options = {} if timeout_ms is None else {"request_timeout_ms": timeout_ms}
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers,
                                **options, **client_security(settings))
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[int]:
    """The partition numbers of a topic; empty when it does not exist."""
    async with admin_client(settings) as admin:
        return await partition_numbers(admin, topic)


async def missing_topics(settings: KafkaSettings, topics: Sequence[str], *,
                         timeout_ms: int | None = None) -> list[str]:
    """Those of the topics that do not exist (listed, never asked for by name)."""
    async with admin_client(settings, timeout_ms=timeout_ms) as admin:
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
