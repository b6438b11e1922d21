"""Secrets and TLS, shared by the three adapters (search server, Kafka, MySQL).

A :class:`Secret` prints as ``**********`` wherever it ends up (a repr of the config, an
f-string in an error, a log line); only :meth:`Secret.reveal` gives the value, and only the
adapters call it, to hand it to their client. :class:`Redactor` is the one place that scrubs
secret values (and credentials inside URLs) from text that leaves the process: log records
and the command line's error lines. :func:`tls_context` builds the one kind of client TLS
context all three clients take.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Iterable
from pathlib import Path

MASK = "**********"
# Shorter values are not scrubbed from free text: they would mask ordinary words (the dev
# stack's password is "indexer"). indexer itself never prints a Secret, whatever its length.
MIN_SCRUBBED = 8
# user:password@ inside a URL: a password pasted into a host list must not be echoed.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


class Secret:
    """A password, key or token that never shows itself when printed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


def redact_url(url: str) -> str:
    """The URL without the ``user:password@`` part."""
    return _URL_CREDENTIALS.sub(r"\g<scheme>", url)


class Redactor(logging.Filter):
    """Replaces every secret value in text with the mask. Installed on the log handler (as a
    filter that rewrites each record) and used by the CLI for the lines it prints itself."""

    def __init__(self, secrets: Iterable[Secret | None] = ()) -> None:
        super().__init__()
        # Longest first, so a secret that contains another is masked whole.
        self._values = sorted({s.reveal() for s in secrets
                               if s and len(s.reveal()) >= MIN_SCRUBBED}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return redact_url(text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self(message)
        if record.exc_info and record.exc_info[1] is not None:
            # Formatted once here so the traceback's text is scrubbed too.
            record.exc_text = self(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def tls_reason(text: str) -> str:
    """OpenSSL's message without its decorations: "certificate verify failed: self-signed
    certificate" out of "[SSL: CERTIFICATE_VERIFY_FAILED] certificate ... (_ssl.c:1006)"."""
    return text.split("] ", 1)[-1].split(" (_ssl.c")[0].strip("()'\"[] ")


def tls_context(*, ca_file: Path | None = None, cert_file: Path | None = None,
                key_file: Path | None = None, key_password: Secret | None = None,
                verify: bool = True, check_hostname: bool = True) -> ssl.SSLContext:
    """A client context: the system's CAs (or ``ca_file``) and hostname checks unless told
    otherwise, plus a client certificate when given. Raises ``OSError``/``ssl.SSLError``
    for unreadable files; callers name the setting."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if cert_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file) if key_file else None,
                                key_password.reveal() if key_password else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = check_hostname
    return context
