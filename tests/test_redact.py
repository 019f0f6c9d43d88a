"""Secret redaction: every kind is replaced, prose is untouched, and redacting twice changes nothing.

Fake secrets are assembled at run time so that no token-shaped literal sits in the repository for
secret scanners to flag.
"""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.secret_shapes import LOOKALIKES, SHAPES, rand, secrets
from vaultmem.redact import CATALOGUE_SIZE, OWN_KINDS, Redaction, has_secret, redact, scrub

_ALNUM = string.ascii_letters + string.digits


def fake(n: int, alphabet: str = _ALNUM, seed: int = 0) -> str:
    """A deterministic random-looking string of length n; starts with a letter if it can, ends in 7."""
    rng = random.Random(f"{seed}:{n}:{alphabet}")
    letter = next((c for c in alphabet if c.isalpha()), "")
    body = "".join(rng.choice(alphabet) for _ in range(n - 1 - len(letter)))
    return letter + body + "7"


def b64url(n: int, seed: int = 0) -> str:
    return fake(n, _ALNUM + "-_", seed)


OPENAI = "sk-" + "proj-" + fake(40, seed=1)
OPENAI_CLASSIC = "sk-" + fake(48, seed=2)
ANTHROPIC = "sk-" + "ant-api03-" + b64url(80, seed=3)
AWS_ID = "AK" + "IA" + fake(16, string.ascii_uppercase + string.digits, seed=4)
AWS_SECRET = fake(40, _ALNUM + "/+", seed=5)
GH_PAT = "gh" + "p_" + fake(36, seed=6)
GH_OAUTH = "gh" + "o_" + fake(36, seed=7)
GH_FINE = "github" + "_pat_" + fake(22, seed=8) + "_" + fake(59, seed=9)
SLACK = (
    "xo" + "xb-" + "-".join([fake(12, string.digits, seed=10), fake(13, string.digits, seed=11), fake(24)])
)
GOOGLE = "AI" + "za" + b64url(35, seed=12)
JWT = "eyJ" + b64url(30, seed=13) + ".eyJ" + b64url(40, seed=14) + "." + b64url(43, seed=15)
BEARER = b64url(32, seed=16)
PEM_BODY = fake(64, _ALNUM + "+/", seed=17)
PEM = (
    "-----BEGIN RSA "
    + "PRIVATE KEY-----\n"
    + PEM_BODY
    + "\n"
    + fake(64, _ALNUM + "+/", seed=18)
    + "\n"
    + "-----END RSA "
    + "PRIVATE KEY-----"
)
GENERIC = fake(32, seed=19)
URL_PASS = "S3cr3t" + fake(8, seed=20)

# (kind, text, secret that must disappear, text that must survive)
SECRETS: list[tuple[str, str, str, str]] = [
    ("openai_key", f"my key is {OPENAI} ok", OPENAI, "my key is"),
    ("openai_key", f"OPENAI_API_KEY={OPENAI_CLASSIC}", OPENAI_CLASSIC, "OPENAI_API_KEY="),
    ("anthropic_key", f"use {ANTHROPIC} for claude", ANTHROPIC, "for claude"),
    ("aws_access_key", f"the id is {AWS_ID}.", AWS_ID, "the id is"),
    ("aws_secret_key", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key"),
    ("aws_secret_key", f'AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"', AWS_SECRET, "AWS_SECRET_ACCESS_KEY"),
    ("github_token", f"token {GH_PAT} expires soon", GH_PAT, "expires soon"),
    ("github_token", f"oauth: {GH_OAUTH}", GH_OAUTH, "oauth"),
    ("github_token", f"pat {GH_FINE}", GH_FINE, "pat"),
    ("slack_token", f"slack bot {SLACK}", SLACK, "slack bot"),
    ("google_api_key", f"maps key {GOOGLE} here", GOOGLE, "maps key"),
    ("jwt", f"session {JWT} end", JWT, "session"),
    ("jwt", f"Authorization: Bearer {JWT}", JWT, "Authorization: Bearer"),
    ("bearer_token", f"Authorization: Bearer {BEARER}", BEARER, "Authorization: Bearer"),
    ("basic_auth", "Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw", "Basic"),
    ("private_key", f"here:\n{PEM}\nthanks", PEM_BODY, "thanks"),
    ("private_key", f"truncated:\n{PEM.split('-----END')[0]}", PEM_BODY, "truncated"),
    ("password", "login with password=hunter2 please", "hunter2", "please"),
    ("password", "passwd: Tr0ub4dor&3", "Tr0ub4dor", "passwd:"),
    ("password", "pwd=abc123;user=admin", "abc123", "user=admin"),
    ("password", '{"user": "ann", "password": "correct horse battery"}', "correct horse", '"user": "ann"'),
    ("password", "DB_PASSWORD=s3cretvalue", "s3cretvalue", "DB_PASSWORD="),
    ("password", "my password is hunter22.", "hunter22", "my password is"),
    ("password", "我的密码是abc12345，别告诉别人。", "abc12345", "别告诉别人"),
    ("password", "密码：Xyz!789", "Xyz!789", "密码"),
    ("password", "WiFi 密碼為 home2024", "home2024", "WiFi"),
    ("url_password", f"postgres://admin:{URL_PASS}@db.example.com:5432/app", URL_PASS, "postgres://admin:"),
    ("url_password", f"redis://:{URL_PASS}@cache:6379/0", URL_PASS, "@cache:6379/0"),
    ("url_password", "mysql://app:p@ss!word9@10.0.0.5/db", "p@ss!word9", "@10.0.0.5/db"),
    ("generic_secret", f"api_key={GENERIC}", GENERIC, "api_key="),
    ("generic_secret", f"token: {GENERIC}", GENERIC, "token:"),
    ("generic_secret", f"SECRET={GENERIC}", GENERIC, "SECRET="),
    ("generic_secret", f'"client_secret": "{GENERIC}"', GENERIC, "client_secret"),
    (
        "azure_key",
        f"AccountName=acme;AccountKey={AWS_SECRET}==;EndpointSuffix=x",
        AWS_SECRET,
        "AccountName=acme",
    ),
    ("keyword_secret", f"the api key for staging is {GENERIC} now", GENERIC, "for staging is"),
    ("keyword_secret", f"secret:\n  {GENERIC}", GENERIC, "secret:"),
    (
        "high_entropy",
        f"here you go: {fake(40, _ALNUM + '+/', seed=21)}",
        fake(40, _ALNUM + "+/", seed=21),
        "here",
    ),
]

PROSE = [
    "I forgot my password yesterday.",
    "The password field is required. The password is required.",
    "The token economy is growing fast this year.",
    "Fixed in commit 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a yesterday.",
    "Request 123e4567-e89b-12d3-a456-426614174000 failed at 14:30.",
    "He was the bearer of bad news. Use Bearer authentication for the API.",
    "Visit https://example.com:8080/path?q=1 or mail alice@example.com.",
    "我忘了密码是什么。密码是多少？",
    "Keys, tokens and secrets belong in a vault, not in chat.",
    "token: the-long-hyphenated-words-are-not-secret and secret=short",
    "We use the sk-learn-style-pipeline-for-everything approach.",
    "ASIA and EUROPE are continents; AKIA is not a word.",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
    "Remember: my PIN is private and the api key rotates monthly.",
    "",
]


def test_every_own_kind_has_a_case() -> None:
    assert {kind for kind, *_ in SECRETS} == {*OWN_KINDS, "keyword_secret", "high_entropy"}


def test_the_gitleaks_catalogue_ships_with_its_licence() -> None:
    from importlib import resources

    data = resources.files("vaultmem").joinpath("data")
    assert CATALOGUE_SIZE >= 200
    assert "Zachary Rice" in data.joinpath("GITLEAKS_LICENSE").read_text(encoding="utf-8")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_every_shape_of_the_corpus_is_redacted(kind: str, seed: int) -> None:
    _, statement, secret = next(case for case in secrets(seed) if case[0] == kind)
    result = redact(statement)
    assert secret not in result.text and result.kinds
    assert has_secret(statement) and not has_secret(result.text)


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_survive(text: str) -> None:
    assert redact(text) == Redaction(text, ())


def test_catalogue_kinds_name_the_service() -> None:
    stripe = "sk" + "_live_" + fake(24, seed=30)
    assert redact(f"stripe {stripe}, keep it safe").kinds == ("stripe_access_token",)
    hf = "h" + "f_" + rand(random.Random(31), 34, string.ascii_letters)
    assert redact(f"HF {hf} here").text == "HF [REDACTED:huggingface_access_token] here"


def test_prose_punctuation_and_chinese_end_a_secret() -> None:
    token = "gl" + "pat-" + fake(20, seed=32)
    for text in (f"use {token}.", f"({token})", f"令牌是{token}，别外传", f"{token}, thanks"):
        assert token not in scrub(text)


def test_hex_named_as_a_hash_is_kept_but_not_when_named_as_a_key() -> None:
    digest = fake(64, "0123456789abcdef", seed=33)
    for text in (f"sha256: {digest}", f"content_hash: {digest[:16]}", f"commit {digest[:40]}"):
        assert scrub(text) == text
    assert digest not in scrub(f"api_key {digest}") and digest not in scrub(f"stored as {digest} yesterday")


def test_long_unbroken_text_stays_linear() -> None:
    blob = "A" * 200_000 + " api key " + "b7" * 50_000
    assert redact(blob).text.startswith("A" * 1000)  # finishes (a quadratic rule would not, here)


@pytest.mark.parametrize(("kind", "text", "secret", "kept"), SECRETS)
def test_secret_is_redacted(kind: str, text: str, secret: str, kept: str) -> None:
    result = redact(text)
    assert secret not in result.text
    assert f"[REDACTED:{kind}]" in result.text
    assert kept in result.text
    assert result.kinds == (kind,)


@pytest.mark.parametrize(("kind", "text", "secret", "kept"), SECRETS)
def test_redaction_is_idempotent(kind: str, text: str, secret: str, kept: str) -> None:
    once = redact(text)
    twice = redact(once.text)
    assert twice.text == once.text
    assert twice.kinds == ()  # a marker is never taken for a secret


def test_url_keeps_user_and_host() -> None:
    result = redact(f"postgres://admin:{URL_PASS}@db.example.com/app")
    assert result.text == "postgres://admin:[REDACTED:url_password]@db.example.com/app"


def test_whole_pem_block_is_one_marker() -> None:
    assert redact(f"key:\n{PEM}\nbye").text == "key:\n[REDACTED:private_key]\nbye"


@pytest.mark.parametrize("text", PROSE)
def test_prose_is_untouched(text: str) -> None:
    assert redact(text) == Redaction(text, ())


def test_several_secrets_in_order_of_appearance() -> None:
    text = (
        f"password=hunter2 then {GH_PAT} and {AWS_ID}, again password: other1 "
        f"and finally postgres://u:{URL_PASS}@h/db with {JWT}"
    )
    result = redact(text)
    for secret in ("hunter2", GH_PAT, AWS_ID, "other1", URL_PASS, JWT):
        assert secret not in result.text
    assert result.kinds == ("password", "github_token", "aws_access_key", "url_password", "jwt")
    assert result.text.count("[REDACTED:password]") == 2
    assert redact(result.text).text == result.text


def test_specific_kind_wins_over_generic() -> None:
    assert redact(f"GITHUB_TOKEN={GH_PAT}").kinds == ("github_token",)
    assert redact(f"api_key: {GOOGLE}").kinds == ("google_api_key",)


SOUP = [
    *(text for _, text, _, _ in SECRETS),
    "password",
    "=",
    ": ",
    '"',
    "'",
    "`",
    "密码是",
    "Bearer ",
    "token=",
    "://",
    "u:",
    "@",
    "/",
    "[REDACTED:password]",
    "[REDACTED:",
    "]",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "\n",
    " ",
    "sk-",
    "eyJ",
    ".",
    GENERIC,
]


@given(st.text())
def test_redact_is_idempotent_on_any_text(text: str) -> None:
    once = redact(text)
    assert redact(once.text).text == once.text


@given(st.lists(st.sampled_from(SOUP) | st.text(max_size=4), max_size=25).map("".join))
def test_redact_is_idempotent_on_secret_soup(text: str) -> None:
    once = redact(text)
    assert redact(once.text).text == once.text
    assert len(once.kinds) == len(set(once.kinds))


def test_a_leaf_is_read_back_redacted_and_rewritten_with_its_own_bytes() -> None:
    from vaultmem.leaffile import keep_body, parse_leaf
    from vaultmem.summaryfile import parse_summary

    text = (
        "---\nid: 0123456789abcdef\nkind: leaf\nsource: chat\n"
        f"speaker: {GH_PAT}\nsession: s1\nstatus: admitted\nentities: [project:{GH_PAT}, person:mia]\n"
        f"provenance: {{title: 'keys {GOOGLE}'}}\ntags: [mine]\n---\nDeploy with {GH_PAT} today.\n"
    )
    leaf, doc = parse_leaf(text, "sources/chat/_fresh/x-0123456789abcdef.md")
    assert GH_PAT not in leaf.text + (leaf.speaker or "") + str(leaf.meta) + str(leaf.entities)
    assert leaf.text == "Deploy with [REDACTED:github_token] today." and leaf.entities == ("person:mia",)
    assert leaf.redactions == ("github_token", "google_api_key")
    assert keep_body(doc, leaf.text) == doc.body  # the person's bytes, not the redacted text
    assert keep_body(doc, "new text") == "new text\n"
    summary = (
        f"---\nid: s0123456789abcde\nkind: summary\nsource: chat\ntitle: keys {GH_PAT}\n---\n"
        f"## Pinned\n\nmine: {GH_PAT}\n\n## Summary\n\nall good\n\n## Children\n\n- [label {GH_PAT}](x.md)\n"
    )
    node, _ = parse_summary(summary, "sources/chat/01-x/_summary.md")
    assert GH_PAT not in node.title + node.pinned + node.text + node.children[0].label


def test_redact_document_keeps_clean_keys_byte_for_byte() -> None:
    from vaultmem.frontmatter import redact_document, split

    text = (
        f"---\nid: 0123456789abcdef\nkind: leaf\nspeaker: {GH_PAT}\ndate: 2024-05-01   # mine\n"
        f"tags: [a, b]\n---\nkey {GH_PAT} and password=hunter22\n"
    )
    clean, kinds = redact_document(text)
    assert GH_PAT not in clean and "hunter22" not in clean and set(kinds) == {"github_token", "password"}
    assert "\ndate: 2024-05-01   # mine\ntags: [a, b]\n" in clean
    meta = split(clean).meta
    assert meta["speaker"] == "[REDACTED:github_token]" and meta["redactions"] == ["github_token", "password"]
    assert redact_document(clean) == (clean, ())
    assert redact_document("plain note, no frontmatter\n") == ("plain note, no frontmatter\n", ())


def test_gitleaks_regexes_translate_to_python() -> None:
    """tools/gitleaks_rules.py: RE2's mid-pattern flags become scoped groups, alternatives kept apart."""
    import importlib.util
    import re
    from pathlib import Path

    path = Path(__file__).parent.parent / "tools" / "gitleaks_rules.py"
    spec = importlib.util.spec_from_file_location("gitleaks_rules", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.go_to_python(r"\b(p8e-(?i)[a-z0-9]{4})x") == r"\b(p8e-(?i:[a-z0-9]{4}))x"
    assert tool.go_to_python(r"a(?i)b|c") == r"a(?i:b)|(?i:c)"
    assert tool.go_to_python(r"(?i)x[[:alnum:]]\z") == r"(?i)x[a-zA-Z0-9]\Z"
    assert re.fullmatch(tool.go_to_python(r"SG\.(?i)[a-z]{3}"), "SG.AbC")
    assert not re.fullmatch(tool.go_to_python(r"SG\.(?i)[a-z]{3}"), "sg.abc")


def test_no_file_the_engine_wrote_in_the_sample_vault_looks_like_a_secret() -> None:
    """Leaf and summary files (ids, hashes, file-name links, frontmatter) are not secrets to `check`."""
    from pathlib import Path

    root = Path(__file__).parent.parent / "sample_vault"
    files = sorted(root.rglob("*.md"))
    assert len(files) > 50
    flagged = [p.relative_to(root).as_posix() for p in files if has_secret(p.read_text(encoding="utf-8"))]
    assert flagged == []
