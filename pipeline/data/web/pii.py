"""PII redaction: e-mail addresses and public IP addresses replaced by placeholders, as datatrove's
``PIIFormatter`` does, with its patterns and its placeholders.

Three differences from datatrove, each a setting:

- IPv6 addresses are redacted too (``ipv6``; datatrove matches IPv4 only);
- addresses at example domains (RFC 2606 and 6761: ``example.com``/``.net``/``.org`` and the ``.example``,
  ``.test``, ``.invalid`` and ``.localhost`` names) are kept (``keep_example_emails``), as are private,
  loopback, link-local and documentation IP ranges (``public_ips_only``, as datatrove's
  ``only_remove_public_ips``): they identify nobody;
- the placeholder is chosen by a hash of the address, not in turn: datatrove's rotation depends on
  which documents one worker saw before, so the same corpus would be redacted differently on other
  partitions; here the same address always gets the same placeholder.

A document is never dropped; :meth:`Redactor.redact` says how many lines and characters it changed.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

EMAIL = re.compile(  # datatrove's pattern
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:(?:[A-Za-z0-9](?:["
    r"A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[(?:(?:25[0-5]|2[0-4][0-9]|["
    r"01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)])")
IPV4 = re.compile(  # datatrove's pattern
    r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)")
IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:)(?![\w:])")
"""Candidates only (eight groups, or fewer around ``::``); :mod:`ipaddress` decides what is an address."""
EMAIL_PLACEHOLDERS = ("email@example.com", "firstname.lastname@example.org")
IP_PLACEHOLDERS = ("22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11",
                   "18.104.22.168")
IPV6_PLACEHOLDERS = ("2001:db8::1", "2001:db8::2")  # the documentation range, as the v4 ones stand for none
_NEEDLES = {EMAIL: "@", IPV6: ":"}  # a character each match holds
EXAMPLE_DOMAINS = ("example.com", "example.net", "example.org")
EXAMPLE_TLDS = ("example", "test", "invalid", "localhost")


@dataclass(frozen=True)
class Redaction:
    """The redacted text and what changed: lines holding a replaced address, and the characters replaced."""

    text: str
    lines: int
    characters: int


class Redactor:
    """Replaces e-mail and IP addresses; each kind can be turned off."""

    def __init__(self, *, emails: bool = True, ips: bool = True, ipv6: bool = True, public_ips_only: bool = True,
                 keep_example_emails: bool = True):
        self.replacers: list[tuple[re.Pattern[str], Callable[[str], str | None]]] = []
        if emails:
            self.replacers.append((EMAIL, functools.partial(_email_placeholder, keep_examples=keep_example_emails)))
        if ips:  # partials of module functions, not lambdas: a step is pickled to the worker processes
            self.replacers.append((IPV4, functools.partial(_ip_placeholder, public_only=public_ips_only,
                                                           placeholders=IP_PLACEHOLDERS)))
        if ips and ipv6:
            self.replacers.append((IPV6, functools.partial(_ip_placeholder, public_only=public_ips_only,
                                                           placeholders=IPV6_PLACEHOLDERS)))

    def redact(self, text: str) -> Redaction:
        original, characters = text, 0
        for pattern, placeholder in self.replacers:
            if _NEEDLES.get(pattern, "") in text:  # most texts hold no "@": the e-mail pattern is the costly one
                text, replaced = _substitute(pattern, placeholder, text)
                characters += replaced
        if not characters:
            return Redaction(text, 0, 0)
        # neither an address nor a placeholder holds a line break, so the lines correspond one to one
        lines = sum(old != new for old, new in zip(original.split("\n"), text.split("\n")))
        return Redaction(text, lines, characters)


def _substitute(pattern: re.Pattern[str], placeholder: Callable[[str], str | None], text: str) -> tuple[str, int]:
    """``text`` with each match that ``placeholder`` gives a replacement for replaced; the characters replaced."""
    pieces, last, characters = [], 0, 0
    for found in pattern.finditer(text):
        replacement = placeholder(found.group(0))
        if replacement is not None:
            pieces += [text[last:found.start()], replacement]
            characters += found.end() - found.start()
            last = found.end()
    return ("".join(pieces) + text[last:], characters) if pieces else (text, 0)


def _pick(address: str, placeholders: tuple[str, ...]) -> str:
    return placeholders[zlib.crc32(address.encode("utf-8")) % len(placeholders)]


def _email_placeholder(address: str, keep_examples: bool) -> str | None:
    domain = address.rsplit("@", 1)[-1].lower()
    if keep_examples and (domain.rsplit(".", 1)[-1] in EXAMPLE_TLDS
                          or any(domain == name or domain.endswith("." + name) for name in EXAMPLE_DOMAINS)):
        return None
    return _pick(address, EMAIL_PLACEHOLDERS)


def _ip_placeholder(candidate: str, public_only: bool, placeholders: tuple[str, ...]) -> str | None:
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        return None
    if public_only and not address.is_global:
        return None
    return _pick(candidate, placeholders)
