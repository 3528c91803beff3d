"""mas_core.netpolicy: allow-list entries and the address check made on save (no DNS)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from mas_core.netpolicy import AllowEntry, BlockedAddress, parse_allow, resolve_checked, url_refusal

SETTING = "MAS_PRIVATE_URL_ALLOW"


def test_entries_are_hosts_addresses_and_cidrs_with_an_optional_port():
    assert parse_allow(("127.0.0.1:11434", "[::1]:8080", "10.0.0.0/8", "Ollama.LAN.", "ollama.lan:1", "::1", " ")) == (
        AllowEntry(network=ipaddress.ip_network("127.0.0.1/32"), port=11434),
        AllowEntry(network=ipaddress.ip_network("::1/128"), port=8080),
        AllowEntry(network=ipaddress.ip_network("10.0.0.0/8")),
        AllowEntry(host="ollama.lan"),
        AllowEntry(host="ollama.lan", port=1),
        AllowEntry(network=ipaddress.ip_network("::1/128")),
    )


@pytest.mark.parametrize("entry, message", [
    ("127.0.0.1:0", "the port must be a number from 1 to 65535"),
    ("host:http", "the port must be a number from 1 to 65535"),
    ("[::1]8080", "expected [address]:port"),
    ("10.0.0.0/33", "is neither a host name, an address nor a CIDR"),
    ("bad host", "is neither a host name, an address nor a CIDR"),
])
def test_a_bad_entry_is_named(entry, message):
    with pytest.raises(ValueError) as error:
        parse_allow((entry,))
    assert repr(entry) in str(error.value) and message in str(error.value)


REFUSED = ["http://127.0.0.1/", "http://127.1/", "http://0x7f000001/", "http://2130706433/", "http://0177.0.0.1/",
           "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://10.0.0.1/", "http://172.16.0.1/",
           "http://192.168.0.1/", "http://169.254.169.254/", "http://100.64.0.1/", "http://0.0.0.0/",
           "http://[fd00::1]/", "http://[fe80::1]/", "http://localhost/", "http://LOCALHOST./",
           "http://a.b.localhost/", "http://ip6-localhost/", "https://user:pw@127.0.0.1:443/"]


@pytest.mark.parametrize("url", REFUSED)
def test_internal_literal_addresses_and_local_names_are_refused_without_an_entry(url):
    assert url_refusal(url, allow=[], setting=SETTING).endswith(
        f"a private/loopback/link-local address; refused (allow it in {SETTING})")


def test_the_refused_list_is_not_empty():
    assert len(REFUSED) >= 20


def test_public_addresses_and_names_pass_and_entries_admit_exactly_what_they_name():
    for url in ("https://api.openai.com/v1", "http://8.8.8.8/", "https://[2606:4700::1111]/",
                "http://example.com:8080/"):
        assert url_refusal(url, allow=[], setting=SETTING) is None, url
    allow = ["127.0.0.1:11434", "10.0.0.0/8", "ollama.localhost"]
    assert url_refusal("http://127.0.0.1:11434/v1", allow=allow, setting=SETTING) is None
    assert url_refusal("http://localhost:11434/v1", allow=allow, setting=SETTING) is None
    assert url_refusal("http://ollama.localhost/v1", allow=allow, setting=SETTING) is None
    assert url_refusal("http://10.200.0.7:9000/", allow=allow, setting=SETTING) is None
    assert url_refusal("http://127.0.0.1:11435/v1", allow=allow, setting=SETTING) == (
        f"host 127.0.0.1 is a private/loopback/link-local address; refused (allow it in {SETTING})")
    assert url_refusal("http://192.168.1.1/", allow=allow, setting=SETTING) is not None
    assert url_refusal("http://metadata/", allow=["metadata"], setting=SETTING) == (
        "host metadata is a cloud metadata service; refused")
    assert url_refusal("gopher://x/", allow=[], setting=SETTING) == "must start with http:// or https://"
    assert url_refusal("http:///path", allow=[], setting=SETTING) == "has no host"


def test_resolving_checks_every_address_of_a_name():
    with pytest.raises(BlockedAddress) as error:
        asyncio.run(resolve_checked("localhost", 80, allow=[], setting=SETTING))
    assert str(error.value) == (
        f"host localhost resolves to 127.0.0.1, a private/loopback/link-local address; refused (allow it in {SETTING})")
    assert asyncio.run(resolve_checked("localhost", 80, allow=["localhost"], setting=SETTING)) in {"127.0.0.1", "::1"}
    with pytest.raises(BlockedAddress, match=r"^cannot resolve host nothing\.invalid"):
        asyncio.run(resolve_checked("nothing.invalid", 80, allow=[], setting=SETTING))
