"""PII redaction: as datatrove's PIIFormatter where it is configured alike, plus IPv6 and example addresses."""

from __future__ import annotations

from datatrove.pipeline.formatters import PIIFormatter

from pipeline.data.web.pii import EMAIL_PLACEHOLDERS, IP_PLACEHOLDERS, IPV6_PLACEHOLDERS, Redactor

TEXT = ("Write to ana.lopez@brightwater.org or to the desk <desk+news@mail.gazette.co.uk>.\n"
        "Our server is 93.184.216.34, the router 192.168.0.1, the docs 203.0.113.9, loopback 127.0.0.1.\n"
        "IPv6: 2a03:2880:f101:83:face:b00c:0:25de, fe80::1, 2001:db8::7, ::1; at 10:30:45 on 2026-03-01.\n"
        "Try someone@example.com or x@host.test, and version 1.2.3.4.5 of the tool.\n"
        "A line without anything.")


def masked(text: str) -> str:
    for placeholder in EMAIL_PLACEHOLDERS + IP_PLACEHOLDERS + IPV6_PLACEHOLDERS:
        text = text.replace(placeholder, "<PII>")
    return text


def test_public_addresses_are_replaced_and_private_or_example_ones_kept():
    redaction = Redactor().redact(TEXT)
    lines = redaction.text.split("\n")
    assert "ana.lopez" not in lines[0] and "desk+news" not in lines[0]
    assert "93.184.216.34" not in lines[1]
    assert all(kept in lines[1] for kept in ("192.168.0.1", "203.0.113.9", "127.0.0.1"))
    assert "2a03:2880" not in lines[2] and all(kept in lines[2] for kept in ("fe80::1", "2001:db8::7", "::1;",
                                                                              "10:30:45"))
    assert "someone@example.com" in lines[3] and "x@host.test" in lines[3]
    assert redaction.lines == 4
    assert redaction.characters == len("ana.lopez@brightwater.org") + len("desk+news@mail.gazette.co.uk") + len(
        "93.184.216.34") + len("2a03:2880:f101:83:face:b00c:0:25de") + len("1.2.3.4")
    assert "version <PII>.5" in masked(redaction.text)  # datatrove's IPv4 pattern has no word boundary either


def test_nothing_to_redact_changes_nothing():
    assert Redactor().redact("plain text\nwith lines").lines == 0


def test_the_same_address_always_gets_the_same_placeholder():
    first = Redactor().redact("a@b.org c@d.org a@b.org").text.split()
    assert first[0] == first[2] and Redactor().redact("a@b.org").text == first[0]


def test_kinds_can_be_turned_off():
    assert Redactor(emails=False).redact(TEXT).text.startswith("Write to ana.lopez@brightwater.org")
    assert "93.184.216.34" in Redactor(ips=False).redact(TEXT).text
    every_ip = Redactor(public_ips_only=False).redact(TEXT).text
    assert "192.168.0.1" not in every_ip and "fe80::1" not in every_ip
    assert "someone@example.com" not in Redactor(keep_example_emails=False).redact(TEXT).text


def test_same_spans_as_datatrove_when_configured_alike():
    """datatrove redacts every e-mail, and IPv4 only; its placeholders rotate, so they are compared masked."""
    ours = Redactor(keep_example_emails=False, ipv6=False).redact(TEXT).text
    assert masked(ours) == masked(PIIFormatter().format(TEXT))
