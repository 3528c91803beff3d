"""The ``pii`` detector: personal data (``kinds``, default all of :data:`PII_KINDS`).

``email``; ``phone``: an international number (``+`` and country code,
8 to 15 digits in all), or a national one written with separators that
starts with a trunk ``0`` (``020 7946 0958``, ``06 12 34 56 78``), has
its area code in parentheses, or is North American (``555-234-5678``,
area and exchange codes not starting with 0 or 1) — not dates
(``2024-11-27``, ``27.11.2024``), IPv4 addresses, versions or card
numbers; ``card``: 13 to 19 digits, bare or in groups separated by
single spaces or dashes, with a card network's leading digits (2221–2720,
3, 4, 5, 6) and a valid Luhn check digit; ``iban``: a country's code, two
check digits and the country's registered length of letters and digits,
optionally in groups of four, mod-97 checked; ``ip``: IPv4 and IPv6
addresses that the ``ipaddress`` module accepts (not ``1.2.3``, nor
``1.2.3.4.5``; an IPv6 address with at least two groups, so not ``::``);
``national_id``: a US Social Security number ``NNN-NN-NNNN`` (not area
000, 666 or 900–999, group 00 or serial 0000), a UK National Insurance
number (``AB 12 34 56 C``, valid prefix letters), a French social
security number (NIR, 15 digits with its mod-97 key, Corsica's 2A/2B),
a Spanish DNI or NIE (its check letter).

Each kind is an RE2 pattern that finds candidates, then a check in Python of what the pattern cannot say (a check
digit, a registered length, the neighbouring characters).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Callable, Iterator

from mas_core.guardrails.detector import Detector, DetectorSettings
from mas_core.guardrails.findings import Context, Span
from mas_core.guardrails.scanning import ScannedText, byte_before, capped, is_word_byte, re2_compiled

PII_KINDS = ("email", "phone", "card", "iban", "ip", "national_id")

_PII_PATTERNS = {
    "email": r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
             r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,63}\b",
    "phone": r"\+[1-9][0-9]{0,2}(?:[ .\-]?(?:\([0-9]{1,4}\)|[0-9]{1,5})){2,6}"
             r"|\([0-9]{2,5}\)[ .\-]?[0-9]{2,4}(?:[ .\-]?[0-9]{2,4}){1,3}"
             r"|[0-9]{2,4}(?:[ .\-][0-9]{2,8}){1,4}",
    "card": r"[0-9](?:[ \-]?[0-9]){12,}",
    "iban": r"(?i)\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}",
    "ipv4": r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}\b",
    "ipv6": r"(?i)(?:[0-9a-f]{0,4}:){2,7}(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9a-f]{0,4})",
    "ssn": r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
    "nino": r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]\b",
    "nir": r"\b[12] ?[0-9]{2} ?[0-9]{2} ?(?:[0-9]{2}|2[ABab]) ?[0-9]{3} ?[0-9]{3} ?[0-9]{2}\b",
    "dni": r"(?i)\b[0-9XYZ][0-9]{7}-?[A-Z]\b",
}

# Registered IBAN lengths (SWIFT's IBAN registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25,
    "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
    "SO": 23, "ST": 25, "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
_NINO_REFUSED_PREFIXES = {b"BG", b"GB", b"KN", b"NK", b"NT", b"TN", b"ZZ"}
_SEPARATORS = re.compile(rb"[ .\-()]+")


@functools.cache
def _pii_regex(name: str):
    return re2_compiled(_PII_PATTERNS[name])


def _luhn(digits: bytes) -> bool:
    total = 0
    for position, digit in enumerate(reversed(digits)):
        value = digit - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card_network(digits: bytes) -> bool:
    """Leading digits some card network issues (Visa 4, Mastercard 51–55 and 2221–2720, Amex, Diners and JCB 3,
    Discover, UnionPay and Maestro 5 and 6)."""
    first = digits[:1]
    if first in (b"3", b"4", b"5", b"6"):
        return True
    return first == b"2" and 2221 <= int(digits[:4]) <= 2720


def _cards(scanned: ScannedText) -> Iterator[Span]:
    data = scanned.data
    for match in _pii_regex("card").finditer(data):
        start, end = match.span()
        groups = [(group.start() + start, group.end() + start) for group in re.finditer(rb"[0-9]+", match.group())]
        # A first or last group glued to a word (ref4242…, …4242x) is part of an identifier, not of a card.
        first = 1 if is_word_byte(byte_before(data, start)) else 0
        last_allowed = len(groups) - (2 if is_word_byte(data[end:end + 1]) else 1)
        index = first
        while index <= last_allowed:
            if data[groups[index][0]] not in b"23456":  # no card network's number starts so
                index += 1
                continue
            # The longest run of whole groups, from this one, that is a card; two cards may follow one another.
            total, found = 0, None
            for last in range(index, min(last_allowed + 1, index + 8)):
                total += groups[last][1] - groups[last][0]
                if total > 19:
                    break
                if total >= 13:
                    digits = b"".join(data[a:b] for a, b in groups[index:last + 1])
                    if _card_network(digits) and _luhn(digits):
                        found = last
            if found is None:
                index += 1
                continue
            yield scanned.span(groups[index][0], groups[found][1], "card")
            index = found + 1


def _ibans(scanned: ScannedText) -> Iterator[Span]:
    data, regex, pos = scanned.data, _pii_regex("iban"), 0
    while (match := regex.search(data, pos)) is not None:
        start = match.start()
        pos = start + 1  # unless an IBAN is found here: the next one may start inside this candidate
        expected = IBAN_LENGTHS.get(match.group()[:2].upper().decode())
        if expected is None:
            continue
        # The candidate may run into the next word: take the country's length of letters and digits, no more (its
        # spaces are single, so each round adds what is missing and the loop ends within a few).
        candidate = match.group()
        size = expected
        while size <= len(candidate) and size - candidate.count(b" ", 0, size) < expected:
            size += expected - (size - candidate.count(b" ", 0, size))
        end = start + size
        if size > len(candidate) or is_word_byte(data[end:end + 1]):
            continue
        compact = data[start:end].replace(b" ", b"").upper().decode()
        number = "".join(str(int(char, 36)) for char in compact[4:] + compact[:4])
        if int(number) % 97 == 1:
            yield scanned.span(start, end, "iban")
            pos = end


def _phone_number(data: bytes, start: int, end: int) -> bool:
    candidate = data[start:end]
    digits = sum(byte in b"0123456789" for byte in candidate)
    if not 8 <= digits <= 15:
        return False
    before, after = byte_before(data, start), data[end:end + 2]
    if is_word_byte(before) or before in (b"+", b"-", b".", b"/", b"_") or is_word_byte(after[:1]):
        return False  # inside a longer number, code or word
    if after[:1] in (b".", b"-", b"/") and after[1:2].isdigit():
        return False
    if candidate.startswith(b"+"):
        return True
    groups = [group for group in _SEPARATORS.split(candidate) if group]
    if _date_like(groups) or (b"." in candidate and len(groups) == 4 and all(len(g) <= 3 for g in groups)):
        return False  # a date, or an IPv4 address
    if candidate.startswith(b"(") or groups[0].startswith(b"0"):
        return True
    north_american = [len(group) for group in groups] == [3, 3, 4]
    return north_american and groups[0][:1] not in b"01" and groups[1][:1] not in b"01"


def _date_like(groups: list[bytes]) -> bool:
    """Whether the first three groups read as a date: year-month-day, or day-month-year / month-day-year."""
    if len(groups) < 3:
        return False
    a, b, c = groups[:3]
    if len(a) == 4 and len(b) <= 2 and len(c) <= 2:
        return 1 <= int(b) <= 12 and 1 <= int(c) <= 31
    if len(c) == 4 and len(a) <= 2 and len(b) <= 2:
        return 1 <= min(int(a), int(b)) and int(a) <= 31 and int(b) <= 31 and min(int(a), int(b)) <= 12
    return False


def _phones(scanned: ScannedText) -> Iterator[Span]:
    data = scanned.data
    for match in _pii_regex("phone").finditer(data):
        if _phone_number(data, *match.span()):
            yield scanned.span(*match.span(), "phone")


def _emails(scanned: ScannedText) -> Iterator[Span]:
    for match in _pii_regex("email").finditer(scanned.data):
        found = match.group()
        at = found.index(b"@")
        skipped = at - len(found[:at].lstrip(b"._%+-"))  # "…see: .john@x.org" starts at john
        if skipped < at:
            yield scanned.span(match.start() + skipped, match.end(), "email")


def _ipv4s(scanned: ScannedText) -> Iterator[Span]:
    data = scanned.data
    for match in _pii_regex("ipv4").finditer(data):
        start, end = match.span()
        before, after = data[max(0, start - 2):start], data[end:end + 2]
        if before[-1:] == b"." and before[:1].isdigit() or after[:1] == b"." and after[1:2].isdigit():
            continue  # 1.2.3.4.5: a version, not an address
        if _ip_address(match.group(), ipaddress.IPv4Address):
            yield scanned.span(start, end, "ip")


def _ipv6s(scanned: ScannedText) -> Iterator[Span]:
    data = scanned.data
    for match in _pii_regex("ipv6").finditer(data):
        start, end = match.span()
        if is_word_byte(byte_before(data, start)) or byte_before(data, start) == b":" or is_word_byte(data[end:end + 1]):
            continue  # std::vector, a time 10:30:45 within more, a MAC address's neighbour
        address = match.group()
        if sum(1 for group in address.split(b":") if group) >= 2 and _ip_address(address, ipaddress.IPv6Address):
            yield scanned.span(start, end, "ip")


def _ip_address(candidate: bytes, kind: type) -> bool:
    try:
        kind(candidate.decode())
    except ValueError:
        return False
    return True


def _social_security_numbers(scanned: ScannedText) -> Iterator[Span]:
    data = scanned.data
    for match in _pii_regex("ssn").finditer(data):
        start, end = match.span()
        area, group, serial = match.group().split(b"-")
        if byte_before(data, start) == b"-" or data[end:end + 1] == b"-":
            continue
        if area not in (b"000", b"666") and area[:1] != b"9" and group != b"00" and serial != b"0000":
            yield scanned.span(start, end, "national_id")


def _insurance_numbers(scanned: ScannedText) -> Iterator[Span]:
    for match in _pii_regex("nino").finditer(scanned.data):
        if match.group()[:2] not in _NINO_REFUSED_PREFIXES:
            yield scanned.span(*match.span(), "national_id")


def _french_numbers(scanned: ScannedText) -> Iterator[Span]:
    for match in _pii_regex("nir").finditer(scanned.data):
        number = match.group().replace(b" ", b"").upper()
        body = number[:13].replace(b"2A", b"19").replace(b"2B", b"18")
        if 97 - int(body) % 97 == int(number[13:]):
            yield scanned.span(*match.span(), "national_id")


def _spanish_numbers(scanned: ScannedText) -> Iterator[Span]:
    for match in _pii_regex("dni").finditer(scanned.data):
        number = match.group().replace(b"-", b"").upper()
        digits = number[:8].replace(b"X", b"0", 1).replace(b"Y", b"1", 1).replace(b"Z", b"2", 1)
        if digits.isdigit() and _DNI_LETTERS[int(digits) % 23] == chr(number[8]):
            yield scanned.span(*match.span(), "national_id")


# Each kind's scans, and the patterns they use (one pattern each, so each is capped on its own).
_PII_SCANS: dict[str, tuple[tuple[Callable[[ScannedText], Iterator[Span]], str], ...]] = {
    "email": ((_emails, "email"),),
    "phone": ((_phones, "phone"),),
    "card": ((_cards, "card"),),
    "iban": ((_ibans, "iban"),),
    "ip": ((_ipv4s, "ipv4"), (_ipv6s, "ipv6")),
    "national_id": ((_social_security_numbers, "ssn"), (_insurance_numbers, "nino"), (_french_numbers, "nir"),
                    (_spanish_numbers, "dni")),
}


def pii_build(settings: DetectorSettings) -> Detector:
    """The ``pii`` detector (see the module)."""
    kinds = settings.kinds(PII_KINDS)
    settings.done()
    scans = [one for kind in kinds for one, _ in _PII_SCANS[kind]]
    for kind in kinds:
        for _, name in _PII_SCANS[kind]:
            _pii_regex(name)

    def scan(text: str, context: Context) -> list[Span]:
        scanned = ScannedText(text)
        return [span for one in scans for span in capped(one(scanned), len(text))]

    return Detector("pii", scan)
