"""Production mode refuses unsafe settings; the local defaults stay usable."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_settings(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MAS_ENV"))}
    return subprocess.run(
        [sys.executable, "-c", "import mas_project.settings as s; print(s.DEBUG, s.MAS_ENV)"],
        cwd=ROOT,
        env={**clean, "DATABASE_URL": "postgresql://u@127.0.0.1:1/x", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_the_default_secret_key():
    result = load_settings(MAS_ENV="production", DJANGO_DEBUG="0")
    assert result.returncode != 0
    assert "MAS_ENV=production needs DJANGO_SECRET_KEY set (32+ characters)" in result.stderr


def test_production_refuses_debug_on():
    result = load_settings(MAS_ENV="production", DJANGO_SECRET_KEY="k" * 40, DJANGO_DEBUG="1")
    assert result.returncode != 0
    assert "MAS_ENV=production refuses to start with DJANGO_DEBUG on" in result.stderr


def test_production_starts_with_a_real_key_and_debug_off():
    result = load_settings(MAS_ENV="production", DJANGO_SECRET_KEY="k" * 40)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "production"]


def test_local_mode_defaults_to_debug():
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "local"]


def test_bad_team_secrets_or_allow_lists_stop_the_server_naming_the_entry():
    result = load_settings(MAS_TEAM_SECRETS="OPENAI_API_KEY,*")
    assert result.returncode != 0
    assert "ImproperlyConfigured: MAS_TEAM_SECRETS: '*' is not a variable name or a PREFIX_*" in result.stderr
    result = load_settings(MAS_PRIVATE_URL_ALLOW="127.0.0.1:11434,10.0.0.0/33")
    assert result.returncode != 0
    assert "MAS_PRIVATE_URL_ALLOW: '10.0.0.0/33' is neither a host name, an address nor a CIDR" in result.stderr
    result = load_settings(MAS_TEAM_SECRETS="OPENAI_API_KEY,GITHUB_*=demo|alpha",
                           MAS_PRIVATE_URL_ALLOW="127.0.0.1:11434,[::1]:8080")
    assert result.returncode == 0, result.stderr
