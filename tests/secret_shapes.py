"""Synthetic secrets with the shapes real ones have (random, never real keys) and look-alikes that are
not secrets. Shared by the redaction tests and ``bench/redact.py``.

Every secret is assembled at run time from random characters, so no token-shaped literal sits in the
repository for secret scanners to flag. ``secrets(seed)`` gives, per kind, a statement a person might
write and the part of it that must never be stored; ``LOOKALIKES`` are strings that must survive
redaction unchanged.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"

Shape = Callable[[random.Random], tuple[str, str]]  # rng -> (statement, secret)


def rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """n random characters with at least one digit, one lower and one upper letter where the alphabet
    has them (a random key has them; it keeps short samples from looking like words)."""
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        need = [cls for cls in (DIGITS, LOWER, UPPER) if any(c in alphabet for c in cls)]
        if n < 8 or all(any(c in cls for c in out) for cls in need):
            return out


def _same(make: Callable[[random.Random], str], template: str = "{}") -> Shape:
    def shape(rng: random.Random) -> tuple[str, str]:
        secret = make(rng)
        return template.format(secret), secret

    return shape


def _pem(rng: random.Random) -> tuple[str, str]:
    body = rand(rng, 64, ALNUM + "+/")
    head, tail = "-----BEGIN RSA " + "PRIVATE KEY-----", "-----END RSA " + "PRIVATE KEY-----"
    return f"{head}\n{body}\n{rand(rng, 64, ALNUM + '+/')}\n{tail}", body


def _basic(rng: random.Random) -> tuple[str, str]:
    token = base64.b64encode(f"admin:{rand(rng, 14)}".encode()).decode()
    return f"Authorization: Basic {token}", token


def _bare_base64(rng: random.Random) -> tuple[str, str]:
    while True:
        token = base64.b64encode(rng.randbytes(30)).decode()
        if any(c.isdigit() for c in token) and any(c.isupper() for c in token):
            return f"here you go: {token}", token


# kind -> shape. The kinds name what a person would call the secret, not the rule that catches it.
SHAPES: dict[str, Shape] = {
    "openai_project_key": _same(lambda r: "sk-" + "proj-" + rand(r, 48, B64URL), "use {} for the bot"),
    "anthropic_key": _same(lambda r: "sk-" + "ant-api03-" + rand(r, 93, B64URL) + "AA", "claude key {}"),
    "aws_access_key_id": _same(lambda r: "AK" + "IA" + rand(r, 16, UPPER + DIGITS), "the id is {}"),
    "aws_secret_key": _same(lambda r: rand(r, 40, ALNUM + "/+"), "aws_secret_access_key={}"),
    "github_pat": _same(lambda r: "gh" + "p_" + rand(r, 36), "token {} expires soon"),
    "github_fine_grained": _same(lambda r: "github" + "_pat_" + rand(r, 22) + "_" + rand(r, 59), "pat {}"),
    "gitlab_pat": _same(lambda r: "gl" + "pat-" + rand(r, 20, ALNUM + "-_"), "gitlab {}"),
    "slack_bot_token": _same(
        lambda r: "xo" + "xb-" + rand(r, 12, DIGITS) + "-" + rand(r, 13, DIGITS) + "-" + rand(r, 24), "bot {}"
    ),
    "slack_webhook": _same(
        lambda r: "T" + rand(r, 8, UPPER + DIGITS) + "/B" + rand(r, 8, UPPER + DIGITS) + "/" + rand(r, 24),
        "post to https://hooks.slack.com/services/{} please",
    ),
    "google_api_key": _same(lambda r: "AI" + "za" + rand(r, 35, B64URL), "maps key {} here"),
    "stripe_live_key": _same(lambda r: "sk" + "_live_" + rand(r, 24), "stripe {}, keep it safe"),
    "stripe_restricted_key": _same(lambda r: "rk" + "_live_" + rand(r, 24), "restricted {}"),
    "sendgrid_key": _same(lambda r: "S" + "G." + rand(r, 22, B64URL) + "." + rand(r, 43, B64URL), "mail {}"),
    "huggingface_token": _same(lambda r: "h" + "f_" + rand(r, 34, string.ascii_letters), "HF token: {}"),
    "npm_token": _same(lambda r: "np" + "m_" + rand(r, 36), "npm publish with {}"),
    "azure_storage_key": _same(
        lambda r: rand(r, 86, ALNUM + "+/") + "==",
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={};EndpointSuffix=core.windows.net",
    ),
    "jwt": _same(
        lambda r: (
            "ey" + "J" + rand(r, 30, B64URL) + ".ey" + "J" + rand(r, 40, B64URL) + "." + rand(r, 43, B64URL)
        ),
        "session {} end",
    ),
    "private_key": _pem,
    "password_assignment": _same(lambda r: rand(r, 12, ALNUM + "!@#$%"), "password={} please"),
    "password_sentence": _same(lambda r: rand(r, 10) + "!", "my password is {}"),
    "password_chinese": _same(lambda r: rand(r, 10), "我的密码是{}，别告诉别人"),
    "url_password": _same(lambda r: rand(r, 14), "postgres://admin:{}@db.example.com:5432/app"),
    "bearer_token": _same(lambda r: rand(r, 40, B64URL), "Authorization: Bearer {}"),
    "basic_auth": _basic,
    "twilio_api_key": _same(lambda r: "S" + "K" + rand(r, 32, HEX), "twilio {}"),
    "mailgun_key": _same(lambda r: "key-" + rand(r, 32, HEX), "mailgun api key: {}"),
    "digitalocean_token": _same(lambda r: "dop" + "_v1_" + rand(r, 64, HEX), "do {}"),
    "shopify_token": _same(lambda r: "shp" + "at_" + rand(r, 32, HEX), "shop {}"),
    "pypi_token": _same(lambda r: "pypi-" + "AgEIcHlwaS5vcmc" + rand(r, 70, B64URL), "upload with {}"),
    "databricks_token": _same(lambda r: "da" + "pi" + rand(r, 32, HEX), "databricks {}"),
    "doppler_token": _same(lambda r: "dp" + ".pt." + rand(r, 43), "doppler {}"),
    "postman_key": _same(lambda r: "PM" + "AK-" + rand(r, 24, HEX) + "-" + rand(r, 34, HEX), "postman {}"),
    "linear_key": _same(lambda r: "lin" + "_api_" + rand(r, 40), "linear {}"),
    "age_secret_key": _same(lambda r: "AGE-SECRET-" + "KEY-1" + rand(r, 58, BECH32), "age {}"),
    "telegram_bot_token": _same(
        lambda r: rand(r, 10, DIGITS) + ":AA" + rand(r, 33, B64URL), "telegram bot token: {}"
    ),
    "sentry_token": _same(lambda r: "sntr" + "yu_" + rand(r, 64, HEX), "sentry {}"),
    "grafana_token": _same(lambda r: "gl" + "sa_" + rand(r, 32) + "_" + rand(r, 8, HEX), "grafana {}"),
    "pulumi_token": _same(lambda r: "pu" + "l-" + rand(r, 40, HEX), "pulumi {}"),
    "hashicorp_vault_token": _same(lambda r: "hv" + "s." + rand(r, 95, B64URL), "vault {}"),
    "perplexity_key": _same(lambda r: "pp" + "lx-" + rand(r, 48), "pplx {}"),
    "heroku_key": _same(lambda r: "HR" + "KU-AA" + rand(r, 58, B64URL), "heroku {}"),
    "keyword_secret": _same(lambda r: rand(r, 32), "the api key for staging is {}"),
    "client_secret": _same(lambda r: rand(r, 40), "client_secret: {}"),
    "bare_base64": _bare_base64,
    "bare_hex": _same(lambda r: rand(r, 64, HEX), "saved it as {} earlier"),
}

# Strings that are not secrets and must come out of redaction exactly as they went in.
LOOKALIKES: list[str] = [
    "Fixed in commit 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a yesterday",
    "merged 9fceb02d0ae598e95dc970b74767f19372d61af8 into main",
    "git show a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
    "reverted 1b2e3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b after the outage",
    "HEAD is now at 4e1243b",
    "Request 123e4567-e89b-12d3-a456-426614174000 failed at 14:30",
    "order id f47ac10b-58cc-4372-a567-0e02b2c3d479 shipped",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sha256sum vaultmem-0.1.tar.gz → 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "checksum (md5) d41d8cd98f00b204e9800998ecf8427e",
    "integrity sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC",
    "supercalifragilisticexpialidocious",
    "internationalization and localization",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
    "Kraftfahrzeughaftpflichtversicherung",
    "AbstractSingletonProxyFactoryBean",
    "test_redaction_is_idempotent_on_any_text",
    "https://github.com/acme/tidepool/commit/3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a",
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42s",
    "https://docs.google.com/document/d/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms/edit",
    "https://example.com/orders/8f14e45fceea167a5a36dedd4bea2543?utm_source=mail",
    "https://arxiv.org/abs/2402.17753v1",
    "data:text/plain;base64,SGVsbG8sIHRoaXMgaXMgYSBwZXJmZWN0bHkgbm9ybWFsIG5vdGUgYWJvdXQgdGhlIGdhcmRlbi4=",
    "SGVsbG8sIHRoaXMgaXMgYSBwZXJmZWN0bHkgbm9ybWFsIG5vdGUgYWJvdXQgdGhlIGdhcmRlbi4=",
    "/usr/local/lib/python3.11/site-packages/vaultmem/redact.py",
    "2024-05-01-mara-keys-chopin-recital-and-pedal-again-ae35b13f4f419ca0.md",
    "version v1.2.3-rc.4+build.5678 released on 2024-05-01T09:00:00Z",
    "我们下周三在上海开会，讨论雾凇拼音的新版本。",
    "张伟说密码是什么他忘了。",
    "Call me at +49 30 1234 5678 or mail alice@example.com.",
    "The password field is required.",
    "The token economy is growing fast this year.",
    "He was the bearer of bad news.",
    "We use the sk-learn-style-pipeline-for-everything approach.",
    "my api key rotates monthly, ask Tom for the current one",
    "AKIA is not a word and neither is ASIA in caps",
    "IBAN DE89 3704 0044 0532 0130 00",
    "Colour #ff8800 and rgb(255, 136, 0)",
    "MAC 00:1A:2B:3C:4D:5E",
    "the keynote on Transformers (Vaswani2017AttentionIsAllYouNeed)",
    "Kyoto ryokan check-in is 15:00 on 14 April, booking ref KY-2024-0414-RYO",
]


def secrets(seed: int = 0) -> list[tuple[str, str, str]]:
    """(kind, statement, secret) for every shape, random but reproducible from ``seed``."""
    rng = random.Random(seed)
    return [(kind, *shape(rng)) for kind, shape in SHAPES.items()]
