import logging
import ssl
import subprocess
from pathlib import Path

import pytest

from indexer.security import MASK, Redactor, Secret, redact_url, tls_context, tls_reason


def test_a_secret_never_shows_itself() -> None:
    secret = Secret("hunter2")
    assert secret.reveal() == "hunter2"
    assert "hunter2" not in f"{secret} {secret!r} {[secret]} {dict(s=secret)}"
    assert secret == Secret("hunter2") and secret != Secret("other") and bool(secret)


def test_credentials_inside_urls_are_cut() -> None:
    assert redact_url("https://elastic:pw@es:9200/x") == "https://es:9200/x"
    assert redact_url("see http://u@h:1 and https://h:2") == "see http://h:1 and https://h:2"


def test_the_redactor_masks_log_records_and_lines(caplog: pytest.LogCaptureFixture) -> None:
    redact = Redactor([Secret("topsecret"), Secret("topsecret-longer"), None,
                       Secret("indexer")])
    assert redact("a topsecret-longer and topsecret") == f"a {MASK} and {MASK}"
    # Too short to scrub from free text: it would mask ordinary words.
    assert redact("indexer running") == "indexer running"
    logger = logging.getLogger("test.redactor")
    logger.addFilter(redact)
    try:
        with caplog.at_level(logging.INFO, logger="test.redactor"):
            logger.info("connecting with %s to %s", "topsecret", "https://u:p@h:1")
            try:
                raise ValueError("refused topsecret")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.removeFilter(redact)
    text = caplog.text
    assert "topsecret" not in text and "u:p@" not in text
    assert f"connecting with {MASK} to https://h:1" in text
    assert f"refused {MASK}" in caplog.records[1].exc_text  # type: ignore[operator]


def test_tls_contexts_verify_unless_told(tmp_path: Path) -> None:
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert not tls_context(check_hostname=False).check_hostname
    loose = tls_context(verify=False)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    key, cert = tmp_path / "c.key", tmp_path / "c.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                    "/CN=client", "-keyout", str(key), "-out", str(cert), "-days", "1"],
                   check=True, capture_output=True)
    tls_context(ca_file=cert, cert_file=cert, key_file=key)  # a client certificate loads
    with pytest.raises(OSError):
        tls_context(ca_file=tmp_path / "missing.crt")


def test_openssl_reasons_lose_their_decorations() -> None:
    assert tls_reason("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
                      "certificate (_ssl.c:1006)") == ("certificate verify failed: self-signed "
                                                       "certificate")
