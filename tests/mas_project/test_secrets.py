"""mas_core.secrets: reading MAS_TEAM_SECRETS, deciding a team's names, keeping values out of log lines."""

from __future__ import annotations

import logging
import sys

import pytest

from mas_core.secrets import (
    Declaration,
    DeclarationError,
    Redactor,
    RedactFilter,
    env_refusal,
    exception_text,
    parse_declarations,
    redacting,
)


def test_declarations_are_names_prefixes_and_optional_teams():
    assert parse_declarations(" OPENAI_API_KEY, GITHUB_*=demo|alpha ,HF_TOKEN=beta,,") == (
        Declaration("OPENAI_API_KEY"), Declaration("GITHUB_*", frozenset({"demo", "alpha"})),
        Declaration("HF_TOKEN", frozenset({"beta"})))
    assert parse_declarations("") == ()


@pytest.mark.parametrize("text, message", [
    ("*", "'*' is not a variable name or a PREFIX_*"),
    ("OPENAI-KEY", "'OPENAI-KEY' is not a variable name or a PREFIX_*"),
    ("1PASSWORD", "'1PASSWORD' is not a variable name"),
    ("A*B", "'A*B' is not a variable name"),
    ("OPENAI_API_KEY=", "'OPENAI_API_KEY=': after = come team slugs separated by | (e.g. OPENAI_API_KEY=demo|alpha)"),
    ("GITHUB_*=demo|a team", "'GITHUB_*=demo|a team': after = come team slugs"),
    (",".join(f"V{i}" for i in range(201)), "201 entries, at most 200"),
])
def test_a_bad_declaration_names_its_entry(text, message):
    with pytest.raises(DeclarationError) as error:
        parse_declarations(text)
    assert str(error.value).startswith("MAS_TEAM_SECRETS: ") and message in str(error.value)


def test_a_team_may_use_what_is_declared_for_it_or_for_every_team(settings):
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY,GITHUB_*=demo|alpha,HF_TOKEN=beta"
    assert [env_refusal(name, team="alpha") for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "GITHUB_")] == [None] * 3
    assert env_refusal("HF_TOKEN", team="alpha") == (
        "HF_TOKEN is declared in MAS_TEAM_SECRETS for other teams, not for team alpha")
    assert env_refusal("HF_TOKEN", team="beta") is None
    assert env_refusal("GITHUB_TOKEN", team="") == (  # no team: only what is declared for every team
        "GITHUB_TOKEN is declared in MAS_TEAM_SECRETS for other teams, not for team (none)")
    for name in ("HOME", "openai_api_key", "GITHUB", "OPENAI_API_KEY_2"):
        assert env_refusal(name, team="alpha") == (
            f"{name} is not declared for teams on this server: the operator lists the environment variables "
            "teams may use in MAS_TEAM_SECRETS")


def test_the_redactor_replaces_longest_values_first_and_leaves_short_ones():
    redact = Redactor(["abcd1234", "abcd1234-extended", "on", ""])
    assert redact("x=abcd1234-extended y=abcd1234 z=on") == "x=[redacted] y=[redacted] z=on"
    assert not Redactor(["ab", "xyz"])


def test_pydantic_errors_are_written_whole_so_a_long_secret_is_found():
    from pydantic import TypeAdapter, ValidationError

    secret = "sk-" + "0123456789abcdef" * 4
    try:
        TypeAdapter(int).validate_json(f"token={secret}")
    except ValidationError as error:
        assert secret not in str(error)  # pydantic cuts it to its two ends …
        assert secret in exception_text(error)  # … which a redactor would miss


def record_with(message: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("mcp.client.stdio", logging.ERROR, __file__, 1, message, args, exc_info)


def test_the_filter_redacts_message_arguments_fields_and_a_cut_exception(settings, monkeypatch):
    monkeypatch.setenv("TEAM_KEY", "declared-value-8841")
    monkeypatch.setenv("UNDECLARED_KEY", "undeclared-value-1")
    settings.MAS_TEAM_SECRETS = "TEAM_*"
    from pydantic import TypeAdapter, ValidationError

    context_secret = "context-secret-" + "x" * 60
    try:
        TypeAdapter(int).validate_json(f"line with {context_secret}")
    except ValidationError:
        exc_info = sys.exc_info()
    record = record_with("got %s and %s", "declared-value-8841", "undeclared-value-1", exc_info=exc_info)
    record.line = "field declared-value-8841"
    with redacting([context_secret]):
        assert RedactFilter().filter(record) is True
    text = logging.Formatter().format(record)
    assert record.getMessage() == "got [redacted] and undeclared-value-1"
    assert record.line == "field [redacted]"
    assert "input_value='line with [redacted]'" in text
    assert "context-secret" not in text and "xxxxxxxx" not in text
    # Outside the context only the declared values are secrets.
    plain = record_with("again context-secret-%s", "x" * 60)
    RedactFilter().filter(plain)
    assert plain.getMessage() == "again context-secret-" + "x" * 60


def test_short_declared_values_are_not_redacted_everywhere(settings, monkeypatch):
    from mas_core.secrets import declared_values

    settings.MAS_TEAM_SECRETS = "GITHUB_*"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_0123456789")
    assert sorted(declared_values()) == ["ghp_0123456789"]
    record = record_with("ok: %s, token %s", "true", "ghp_0123456789")
    RedactFilter().filter(record)
    assert record.getMessage() == "ok: true, token [redacted]"


def test_a_record_with_nothing_secret_is_left_as_it_was(settings):
    settings.MAS_TEAM_SECRETS = ""
    try:
        raise ValueError("plain")
    except ValueError:
        exc_info = sys.exc_info()
    record = record_with("hello %s", "world", exc_info=exc_info)
    RedactFilter().filter(record)
    assert (record.msg, record.args, record.exc_info) == ("hello %s", ("world",), exc_info)


def test_the_manuals_declaration_examples_mean_what_it_says(settings):
    import re

    from tests.manual import example

    block = example("docs/security.md", language="sh", heading="Secrets", containing="MAS_TEAM_SECRETS=").text
    examples = re.findall(r'^MAS_TEAM_SECRETS="([^"]*)"', block, re.M)
    assert len(examples) == 2
    settings.MAS_TEAM_SECRETS = examples[0]  # both, for every team
    assert [env_refusal(name, team=team) for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
            for team in ("research", "support", "other")] == [None] * 6
    assert env_refusal("GITHUB_TOKEN", team="research") is not None
    settings.MAS_TEAM_SECRETS = examples[1]
    assert env_refusal("OPENAI_API_KEY", team="support") is None
    assert env_refusal("OPENAI_API_KEY", team="other") is not None
    assert env_refusal("GITHUB_TOKEN", team="research") is None
    assert env_refusal("GITHUB_TOKEN", team="support") is not None
