"""The dashboard: its Vault reads, its JSON, its HTTP guard, its export, and the page in a real Chromium.

The vault is a small assistant chat and team channel over five days of March 2026 with a gap (6-8
March), two memories whose text is HTML that would run if it were ever rendered as markup, git
auto-commit on, compacted into levels, one level stale after an edit, and a configured source folder.
Browser tests (marked slow) drive Debian's chromium through Playwright's Python client with
``executable_path``; nothing is downloaded.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest

from vaultmem.config import parse_config
from vaultmem.dashboard import Dashboard, Panels, export_html
from vaultmem.dashboard.page import CHROMIUM, CHROMIUM_FLAGS
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput, ReadOnlyVault
from vaultmem.vault import Vault

DEADLINE_MS = 90_000  # only bounds a hang: every wait is on a state of the page

XSS_IMG = '<img src=x onerror="window.__xss=1">'
XSS_SCRIPT = "<script>window.__xss=2</script>"

CONFIG = """\
[git]
auto_commit = true

[compact]
fresh_keep_leaves = 3
seal_min_leaves = 4
bucket_target_leaves = 4
bucket_min_leaves = 2

[sources]
inbox = "../inbox"
"""

CHAT = [  # (day, time, role, speaker, text) of the assistant chat
    (
        "2026-03-02",
        "08:41",
        "user",
        "Mara",
        "Morning! Can you help me plan the Kyoto trip? 11 to 19 April, budget €2,400, trains over flights.",
    ),
    (
        "2026-03-02",
        "08:42",
        "assistant",
        None,
        "Sure, Mara. Lisbon to Kyoto via Frankfurt is the cheapest route, and the ryokan in Higashiyama needs booking early.",
    ),
    (
        "2026-03-02",
        "08:45",
        "user",
        "Mara",
        "Diego recommended Yadoya Shirakawa, the ryokan near the Shirakawa canal in Kyoto.",
    ),
    (
        "2026-03-02",
        "08:46",
        "assistant",
        None,
        "Noted: Yadoya Shirakawa in Kyoto, recommended by Diego. Check-in there is by 18:00.",
    ),
    (
        "2026-03-05",
        "19:02",
        "user",
        "Mara",
        "Remember that my dentist appointment is on 24 March at 10:30 with Dra. Sousa in Lisbon.",
    ),
    (
        "2026-03-05",
        "19:03",
        "assistant",
        None,
        "Saved: dentist on 24 March at 10:30, Dra. Sousa, Avenida de Roma in Lisbon.",
    ),
    (
        "2026-03-09",
        "20:18",
        "user",
        "Mara",
        "Booked the ryokan: Yadoya Shirakawa, two nights for ¥76,000, arriving by 18:00 on 13 April.",
    ),
    (
        "2026-03-09",
        "20:19",
        "assistant",
        None,
        "Great. That leaves about €1,510 of the Kyoto budget for trains, temples and food.",
    ),
    (
        "2026-03-09",
        "20:31",
        "user",
        "Mara",
        f"The newsletter footer renders as {XSS_IMG} in the preview, weird.",
    ),
    (
        "2026-03-09",
        "20:32",
        "assistant",
        None,
        f"That is raw HTML leaking into the template: {XSS_SCRIPT} should never show in an email preview.",
    ),
]
SLACK = [  # (day, time, speaker, text) of the team channel
    (
        "2026-03-03",
        "09:10",
        "Diego",
        "The Postgres 16 cutover for Tidepool is planned for 17 March, window 06:00 to 08:00 UTC.",
    ),
    ("2026-03-03", "09:12", "Priya", "I'll prepare the pg_upgrade dry run on staging before Friday."),
    ("2026-03-03", "09:15", "Mara", "Please post the rollback plan for Postgres in the Tidepool channel."),
    (
        "2026-03-10",
        "11:02",
        "Priya",
        "The pg_upgrade dry run on staging took 6 minutes; Postgres 16 works with Tidepool.",
    ),
    ("2026-03-10", "11:05", "Diego", "Great, the Tidepool cutover to Postgres 16 stays on 17 March."),
]
PER_DAY = Counter(day for day, *_ in CHAT) + Counter(day for day, *_ in SLACK)
NOTE = "# Reading list\n\n- In Praise of Shadows by Jun'ichirō Tanizaki, to read before the Kyoto trip.\n"


def build(root: Path) -> Vault:
    """The dashboard's test vault under ``root`` (``root/vault``, ``root/inbox``)."""
    (root / "inbox").mkdir(parents=True)
    (root / "inbox" / "reading-list.md").write_text(NOTE, encoding="utf-8")
    vault = Vault.init(root / "vault", CONFIG, embedder=FakeEmbedder())
    vault.ingest_messages(
        [
            {
                "id": f"c{i}",
                "role": role,
                "speaker": who,
                "content": text,
                "ts": f"{day}T{hm}:00Z",
                "session": f"{day}-chat",
            }
            for i, (day, hm, role, who, text) in enumerate(CHAT)
        ],
        source="assistant-chat",
    )
    vault.ingest_messages(
        [
            {
                "id": f"s{i}",
                "role": "user",
                "speaker": who,
                "content": text,
                "ts": f"{day}T{hm}:00Z",
                "session": f"{day}-tidepool",
            }
            for i, (day, hm, who, text) in enumerate(SLACK)
        ],
        source="team-slack",
    )
    vault.compact()
    # A hand-made change under a sealed level: its summary is stale until the next compaction.
    sealed = next(x for x in vault.ls(source="assistant-chat") if "/_fresh/" not in x.path)
    vault.update_content(sealed.id, sealed.text + " (edited)")
    return vault


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vault]:
    vault = build(tmp_path_factory.mktemp("dash"))
    yield vault
    vault.close()


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def _leaf_with(vault: Vault, needle: str) -> Any:
    return next(x for x in vault.ls() if needle in x.text)


# -- config and the Vault's reads ------------------------------------------------------------------------
def test_sources_config_names_folders_and_rejects_bad_entries() -> None:
    config = parse_config('[sources]\nmail = "~/Mail/inbox.mbox"\nnotes = "notes"\n')
    assert config.sources == (("mail", "~/Mail/inbox.mbox"), ("notes", "notes"))
    with pytest.raises(InvalidInput, match="invalid source name"):
        parse_config('[sources]\n"a/b" = "x"\n')
    with pytest.raises(InvalidInput, match="must be a folder or file path"):
        parse_config("[sources]\nmail = 3\n")
    with pytest.raises(InvalidInput, match="Windows reserves"):
        parse_config('[sources]\nCON = "x"\n')


def test_source_folders_resolve_against_the_vault_and_home(tmp_path: Path) -> None:
    vault = Vault.init(
        tmp_path / "v", '[sources]\ninbox = "../inbox"\nmail = "~/Mail"\n', embedder=FakeEmbedder()
    )
    with vault:
        folders = vault.source_folders()
    assert folders == {"inbox": tmp_path / "inbox", "mail": Path.home() / "Mail"}


def test_queue_ingest_runs_through_the_queue_and_adds_nothing_twice(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "reading-list.md").write_text(NOTE, encoding="utf-8")
    with Vault.init(tmp_path / "v", '[sources]\ninbox = "../inbox"\n', embedder=FakeEmbedder()) as vault:
        assert vault.queue_ingest("inbox") is True
        assert vault.queue_ingest("inbox") is False  # the same job while it waits
        assert vault.jobs.by_kind()["ingest"]["queued"] == 1
        report = vault.work()
        assert report.jobs_failed == 0
        assert any("ingest inbox: 1 new leaves" in line for line in report.operations)
        assert [x.text for x in vault.ls(source="inbox")] == [NOTE.strip()]
        vault.queue_ingest("inbox")
        again = vault.work()
        assert any("0 new leaves (1 already present)" in line for line in again.operations)
        with pytest.raises(InvalidInput, match="no configured source 'mail'"):
            vault.queue_ingest("mail")


def test_ingest_of_a_missing_folder_fails_its_job_with_the_reason(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", '[sources]\ngone = "../gone"\n', embedder=FakeEmbedder()) as vault:
        vault.queue_ingest("gone")
        report = vault.work()
        assert report.jobs_failed >= 1
        failed = vault.jobs.list()
        assert failed and failed[0].kind == "ingest" and "does not exist" in (failed[0].last_error or "")


def test_queue_compaction_queues_a_seal_per_source_and_runs_nothing(vault: Vault) -> None:
    vault.ingest_messages(
        [
            {
                "id": f"m{i}",
                "role": "user",
                "content": f"Note {i} about the garden roses and the fence.",
                "ts": "2024-03-01T10:00:00Z",
            }
            for i in range(3)
        ],
        source="garden",
    )
    before = vault.jobs.by_kind()
    added = vault.queue_compaction()
    after = vault.jobs.by_kind()
    assert added >= 1
    assert after["seal"]["queued"] == 1 and "seal" not in before
    assert after.get("admit", {}).get("queued") == before["admit"]["queued"]  # nothing ran


def test_leaves_per_day_counts_every_day_with_a_leaf_and_filters_by_source(built: Vault) -> None:
    days = built.leaves_per_day("2026-03-01", "2026-03-31")
    assert days == dict(sorted(PER_DAY.items()))
    assert built.leaves_per_day("2026-03-01", "2026-03-31", source="team-slack") == {
        "2026-03-03": 3,
        "2026-03-10": 2,
    }
    assert built.leaves_per_day("2026-03-06", "2026-03-08") == {}
    with pytest.raises(InvalidInput, match="ends"):
        built.leaves_per_day("2026-03-10", "2026-03-01")


def test_an_undated_note_counts_on_its_file_day_as_in_the_digest(tmp_path: Path) -> None:
    """A section that names no date has no time: the heatmap puts it on its file's day, as the
    day's digest does, so the two never disagree about a day."""
    (tmp_path / "inbox").mkdir()
    note = tmp_path / "inbox" / "reading-list.md"
    note.write_text(NOTE, encoding="utf-8")
    with Vault.init(tmp_path / "v", '[sources]\ninbox = "../inbox"\n', embedder=FakeEmbedder()) as vault:
        vault.ingest_source("inbox")
        vault.flush()
        (leaf,) = vault.ls(source="inbox")
        assert leaf.ts is None
        day = datetime.fromtimestamp((tmp_path / "v" / leaf.path).stat().st_mtime, UTC).date()
        assert vault.leaves_per_day(day, day) == {day.isoformat(): 1}
        assert vault.leaves_per_day(day, day, source="other") == {}
        assert vault.leaves_per_day("2020-01-01", "2020-01-02") == {}
        (digest,) = vault.global_digest(day)
        assert digest.descendants == 1
        assert Panels(vault).day(day.isoformat())["leaves"] == 1


def test_children_pages_through_a_source_in_reading_order_with_stale_levels(built: Vault) -> None:
    whole, total = built.children(source="assistant-chat", limit=100)
    assert total == len(whole) >= 2
    first, total_again = built.children(source="assistant-chat", limit=1)
    second, _ = built.children(source="assistant-chat", offset=1, limit=1)
    assert total_again == total
    assert [n.id for n in first + second] == [n.id for n in whole[:2]]
    levels = [n for n in whole if n.kind == "summary"]
    assert levels and any(n.stale for n in levels)  # the edited leaf's level
    inside, n_inside = built.children(levels[0].id)
    assert n_inside == levels[0].children == len(inside) > 0
    with pytest.raises(InvalidInput):
        built.children()


def test_commits_of_today_carry_files_and_patches(built: Vault) -> None:
    commits = built.commits_of("today")
    assert commits, "git auto-commit recorded the ingests and the compaction"
    adds = [c for c in commits if c.subject.startswith("memory: add")]
    assert adds and any(f.startswith("A sources/assistant-chat/") for c in adds for f in c.files)
    assert any("Yadoya Shirakawa" in c.diff for c in adds)
    # Vectors are named in the file list but their base64 is left out of the patch.
    assert any(f.endswith("/_embeddings.json") for c in commits for f in c.files)
    assert not any("_embeddings.json b/" in c.diff for c in commits)
    assert built.commits_of("2020-01-01") == []


# -- the panels' JSON --------------------------------------------------------------------------------
def test_status_names_a_git_operation_that_pauses_writes(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", "[git]\nauto_commit = true\n", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(
            [{"id": "m1", "role": "user", "content": "Pick up the bike on Friday."}], source="chat"
        )
        panels = Panels(vault)
        assert panels.status()["git"] is None
        today = datetime.now(UTC).date().isoformat()
        before = panels.day(today)["commits"]
        assert before, "the ingest was committed"
        # A commit by hand moves HEAD and leaves the index as it was: the day's list follows it.
        git(
            vault.layout.root,
            "-c",
            "user.name=Mara",
            "-c",
            "user.email=mara@example.org",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "by hand",
        )
        assert panels.day(today)["commits"][0]["subject"] == "by hand"
        git(vault.layout.root, "checkout", "-q", "--detach")
        busy = Panels(vault).status()["git"]
        assert busy["operation"] == "detached HEAD" and "git switch" in busy["advice"]
        assert "detached HEAD" in busy["why"]
        git(vault.layout.root, "switch", "-q", "-")
        assert Panels(vault).status()["git"] is None


def test_panels_answer_from_the_vault(built: Vault) -> None:
    panels = Panels(built)
    status = panels.status()
    assert status["state"] in ("idle", "waiting")
    assert status["sources"] == [
        {"name": "inbox", "path": str(built.layout.root.parent / "inbox"), "exists": True}
    ]
    metrics = panels.metrics()
    assert metrics["leaves"] == sum(PER_DAY.values())
    assert {s["name"]: s["leaves"] for s in metrics["sources"]} == {"assistant-chat": 10, "team-slack": 5}
    graph = panels.graph()
    names = {n["name"] for n in graph["nodes"]}
    assert {"Kyoto", "Mara", "Postgres"} <= names
    assert all(e["source"] in {n["key"] for n in graph["nodes"]} for e in graph["edges"])
    heat = panels.heatmap(last="2026-03-31")
    assert heat["days"] == dict(sorted(PER_DAY.items())) and heat["total"] == 15
    kyoto = next(n for n in graph["nodes"] if n["name"] == "Kyoto")
    topic = panels.topic(kyoto["key"])
    assert topic["entity"]["name"] == "Kyoto" and any("Kyoto" in f["text"] for f in topic["facts"])
    found = panels.search("two nights arriving", scope="source:assistant-chat")
    assert "Booked the ryokan" in found["hits"][0]["text"]
    assert all(h["source"] == "assistant-chat" for h in found["hits"])
    dated = panels.search("dentist appointment", since="2026-03-05", until="2026-03-05")
    assert dated["hits"] and all(h["ts"].startswith("2026-03-05") for h in dated["hits"])
    day = panels.day("2026-03-09")
    assert day["leaves"] == 4 and day["digest"] is not None
    assert any(c["path"] for c in day["digest"]["children"])


def test_cached_views_follow_changes_made_by_another_process(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(
            [
                {
                    "id": "a",
                    "role": "user",
                    "content": "Mara booked the ryokan in Kyoto.",
                    "ts": "2026-03-09T20:00:00Z",
                }
            ],
            source="chat",
        )
        panels = Panels(vault)
        assert panels.metrics()["leaves"] == 1
        assert panels.metrics() is not None and panels.heatmap(last="2026-03-31")["total"] == 1
        assert panels.day("2026-03-10")["digest"] is None
        with Vault.open(vault.layout.root, embedder=FakeEmbedder()) as other:  # its own connection
            other.ingest_messages(
                [
                    {
                        "id": "b",
                        "role": "user",
                        "content": "Diego joins in Lisbon on Friday.",
                        "ts": "2026-03-10T09:00:00Z",
                    }
                ],
                source="chat",
            )
            other.flush()
        assert panels.metrics()["leaves"] == 2
        assert panels.heatmap(last="2026-03-31")["days"] == {"2026-03-09": 1, "2026-03-10": 1}
        day = panels.day("2026-03-10")
        assert day["leaves"] == 1 and "Lisbon" in json.dumps(day["digest"])


def test_the_day_panel_writes_nothing_and_shows_the_digest_the_job_will_write(tmp_path: Path) -> None:
    """A page view is a read: a day whose digest was never written is shown from memory, no file is
    written; the digest written later holds the same links."""
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(
            [
                {
                    "id": "a",
                    "role": "user",
                    "content": "Mara booked the ryokan in Kyoto for two nights.",
                    "ts": "2026-03-09T20:00:00Z",
                }
            ],
            source="chat",
        )
        vault.flush()
        root = vault.layout.root

        def files() -> dict[str, bytes]:
            return {
                str(p.relative_to(root)): p.read_bytes()
                for p in root.rglob("*")
                if p.is_file() and ".vaultmem" not in p.parts
            }

        before = files()
        day = Panels(vault).day("2026-03-09")
        assert day["digest"] is not None and "ryokan" in json.dumps(day["digest"])
        assert files() == before  # nothing written
        (written,) = vault.global_digest("2026-03-09")  # the writer's digest
        assert files() != before
        assert [c.label for c in written.children] == [c["label"] for c in day["digest"]["children"]]


def test_a_read_only_dashboard_refuses_requests(built: Vault) -> None:
    panels = Panels(built, actions=False)
    assert panels.status()["actions"] is False
    with pytest.raises(ReadOnlyVault):
        panels.request_ingest("inbox")
    with pytest.raises(ReadOnlyVault):
        panels.request_compact()


# -- HTTP: the guard, the headers, the routes ----------------------------------------------------------
@pytest.fixture
def served(built: Vault) -> Iterator[Dashboard]:
    dash = Dashboard(built, run_queue=False, embedder=FakeEmbedder()).start()
    yield dash
    dash.close()


def request(
    dash: Dashboard,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", dash.port, timeout=60)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Host": f"127.0.0.1:{dash.port}", **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_requests_without_the_token_are_refused(served: Dashboard) -> None:
    for path in ("/", "/api/status", "/static/app.js", "/file/x.md", "/?token=wrong"):
        status, headers, body = request(served, path)
        assert status == 403, path
        assert b"forbidden" in body
        assert "default-src 'none'" in headers["content-security-policy"]
    status, _, _ = request(served, "/api/status", headers={"Cookie": f"{served.cookie}=wrong"})
    assert status == 403
    # Another name for the host (DNS rebinding) is refused even with the token.
    status, _, _ = request(served, f"/api/status?token={served.token}", headers={"Host": "evil.example:80"})
    assert status == 403


def test_the_token_becomes_a_cookie_and_every_response_has_the_policy(served: Dashboard) -> None:
    status, headers, _ = request(served, f"/?token={served.token}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert (
        cookie.startswith(f"{served.cookie}={served.token};")
        and "HttpOnly" in cookie
        and "SameSite=Strict" in cookie
    )
    jar = {"Cookie": f"{served.cookie}={served.token}"}
    status, headers, body = request(served, "/", headers=jar)
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe" not in csp and "frame-ancestors 'none'" in csp
    assert b'<script src="static/app.js" defer>' in body
    assert b"http://" not in body and b"https://" not in body  # nothing from elsewhere
    for asset in ("app.js", "app.css", "vendor/cytoscape.min.js", "vendor/purify.min.js"):
        status, headers, _ = request(served, f"/static/{asset}", headers=jar)
        assert status == 200 and headers["x-content-type-options"] == "nosniff"
    status, _, body = request(served, "/api/metrics", headers=jar)
    assert status == 200 and json.loads(body)["leaves"] == 15


def test_posts_need_the_token_in_a_header(served: Dashboard, built: Vault) -> None:
    jar = {"Cookie": f"{served.cookie}={served.token}"}
    status, _, _ = request(served, "/api/compact", method="POST", headers=jar, body={})
    assert status == 403  # a cookie alone (what another site's form would send) is not enough
    status, _, body = request(
        served,
        "/api/ingest",
        method="POST",
        headers={"X-Vaultmem-Token": served.token},
        body={"source": "nope"},
    )
    assert status == 400 and "no configured source" in json.loads(body)["error"]


def test_file_links_serve_vault_markdown_as_sandboxed_text_only(served: Dashboard, built: Vault) -> None:
    jar = {"Cookie": f"{served.cookie}={served.token}"}
    leaf = _leaf_with(built, "Booked the ryokan")
    status, headers, body = request(served, "/file/" + quote(leaf.path), headers=jar)
    assert status == 200 and "Booked the ryokan" in body.decode()
    assert headers["content-type"].startswith("text/plain") and headers["content-security-policy"].startswith(
        "sandbox"
    )
    for bad in ("../../etc/passwd", ".vaultmem/config.toml", "%2e%2e/x.md", "/etc/hosts", ".git/HEAD"):
        status, _, _ = request(served, "/file/" + bad, headers=jar)
        assert status == 404, bad


def test_api_errors_are_one_line_json(served: Dashboard) -> None:
    jar = {"X-Vaultmem-Token": served.token}
    status, _, body = request(served, "/api/search?q=", headers=jar)
    assert status == 400 and "type a few words" in json.loads(body)["error"]
    status, _, body = request(served, "/api/children?node=../x", headers=jar)
    assert status == 400
    status, _, body = request(served, "/api/topic?key=person:nobody-at-all", headers=jar)
    assert status == 400 and "no entity" in json.loads(body)["error"]


# -- the export ---------------------------------------------------------------------------------------
def test_export_is_one_file_with_a_hash_policy_and_inert_data(built: Vault, tmp_path: Path) -> None:
    out = tmp_path / "snapshot.html"
    size = export_html(built, out)
    page = out.read_text(encoding="utf-8")
    assert size == out.stat().st_size
    assert page.count("<script") == 4  # the data, the sanitiser, the graph library, the app
    assert "<script src" not in page and 'rel="stylesheet"' not in page
    assert "http://" not in page.split('id="vm-snapshot"')[0]
    policy = page.split('http-equiv="Content-Security-Policy" content="')[1].split('"')[0]
    assert policy.startswith("default-src 'none'; script-src 'sha256-") and "connect-src" not in policy
    data = page.split('<script type="application/json" id="vm-snapshot">')[1].split("</script>")[0]
    assert "<" not in data  # memory text cannot end the element or start markup
    snapshot = json.loads(data)
    assert any(XSS_IMG in x["text"] for x in snapshot["leaves"])
    assert len(snapshot["leaves"]) == 15 and snapshot["status"]["actions"] is False
    (tmp_path / "mine.html").write_text("<p>my own page</p>")
    with pytest.raises(InvalidInput, match="not a vaultmem export"):
        export_html(built, tmp_path / "mine.html")
    assert export_html(built, out) > 0  # an earlier export is replaced


def test_cli_export_writes_the_file_and_says_where(
    built: Vault, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vaultmem.cli import main

    out = tmp_path / "cli.html"
    main(["dashboard", "--export", str(out), "--vault", str(built.layout.root), "--json"])
    said = json.loads(capsys.readouterr().out)
    assert said == {"path": str(out), "bytes": out.stat().st_size}
    assert out.read_bytes().startswith(b"<!doctype html>")


def test_cli_serves_on_loopback_until_interrupted(built: Vault) -> None:
    """Every wait is on a state (the address printed, the reply, the exit) with a deadline that only
    bounds a hang; a child still running at the end is killed, so none outlives the test."""
    argv = [
        sys.executable,
        "-m",
        "vaultmem.cli",
        "dashboard",
        "--read-only",
        "--vault",
        str(built.layout.root),
    ]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = _line_within(proc, EXIT_S)  # the server says where it is once it listens
            url = urlsplit(line.split(": ", 1)[1].strip())
            assert url.hostname == "127.0.0.1" and url.query.startswith("token=")
            conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=EXIT_S)
            conn.request("GET", f"/api/status?{url.query}")
            status = json.loads(conn.getresponse().read())
            conn.close()
            assert status["actions"] is False and status["vault"]["root"] == str(built.layout.root)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=EXIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert code == 0
        assert "stopped" in proc.stderr.read()


EXIT_S = 240.0  # bounds a hang only: a start or stop under a load of 10+ on two cores took over 60 s


def _line_within(proc: subprocess.Popen[str], seconds: float) -> str:
    """The child's first line of output, or a failure once ``seconds`` passed without one."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(seconds), f"no address printed within {seconds:.0f} s: {proc.poll()=}"
    line = proc.stdout.readline()
    assert line, f"the dashboard ended without printing its address (exit {proc.wait()})"
    return line


# -- the page in a real browser --------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (`just setup` does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEADLINE_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == [], errors


def _open(page: Any, url: str, panel: str) -> None:
    page.goto(url)
    page.wait_for_selector("html[data-ready-status]")
    page.evaluate(f"location.hash = '#{panel}'")


def _shown(graph: dict[str, Any]) -> int:
    """The entities the page draws at first: dates, amounts, versions, emails and URLs start hidden."""
    return sum(1 for n in graph["nodes"] if n["kind"] not in {"date", "money", "version", "email", "url"})


def _graph_checks(page: Any, expected_visible: int) -> None:
    page.wait_for_selector('#cy[data-ready="1"]')
    drawn = page.evaluate(
        "() => { const cy = window.vaultmem.cy; const box = document.getElementById('cy').getBoundingClientRect();"
        " const shown = cy.nodes().filter(n => n.visible());"
        " const inside = shown.filter(n => { const p = n.renderedPosition(); return p.x >= 0 && p.y >= 0 && p.x <= box.width && p.y <= box.height; });"
        " let painted = 0; for (const c of document.querySelectorAll('#cy canvas')) {"
        "  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "  for (let i = 3; i < d.length; i += 4) if (d[i]) painted++; }"
        " return {shown: shown.length, inside: inside.length, painted, label: document.getElementById('cy').dataset.nodes}; }"
    )
    assert drawn["shown"] == expected_visible > 0
    assert drawn["inside"] == drawn["shown"]
    assert drawn["painted"] > 500  # the canvas holds the drawing, not a blank
    assert drawn["label"] == str(expected_visible)
    # Click the node of Kyoto: its topic page opens beside the graph.
    x, y = page.evaluate(
        "() => { const n = window.vaultmem.cy.nodes().filter(n => n.data('name') === 'Kyoto')[0];"
        " const p = n.renderedPosition(); const b = document.getElementById('cy').getBoundingClientRect();"
        " return [b.left + p.x, b.top + p.y]; }"
    )
    page.mouse.click(x, y)
    page.wait_for_selector("html[data-ready-topic]")
    assert page.inner_text("#topic-name") == "Kyoto"
    assert "Kyoto" in page.inner_text("#topic-facts")


def _heatmap_checks(page: Any, first: str, last: str) -> None:
    page.wait_for_selector("html[data-ready-heatmap]")
    cells = page.evaluate(
        "() => Array.from(document.querySelectorAll('#heat-svg rect.cell')).map(r => [r.dataset.day, Number(r.dataset.count)])"
    )
    days = [d for d, _ in cells]
    start, end = datetime.fromisoformat(first), datetime.fromisoformat(last)
    assert len(days) == len(set(days)) == (end - start).days + 1 == 365  # one cell per day, no more
    assert days[0] == first and days[-1] == last
    counts = dict(cells)
    for day, n in PER_DAY.items():
        assert counts[day] == n, day
    assert counts["2026-03-07"] == 0 and sum(counts.values()) == 15  # the gap shows as empty days


def _search_checks(page: Any, file_url: Any) -> None:
    page.wait_for_selector("#search-q")
    page.fill("#search-q", "two nights arriving")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("html[data-ready-search]")
    first = page.locator("#search-results article.mcard").first
    assert "Booked the ryokan" in first.inner_text()
    href = first.locator("a.file-link").get_attribute("href")
    obsidian = first.locator("a.obsidian-link").get_attribute("href")
    assert obsidian.startswith("obsidian://open?vault=vault&file=sources%2Fassistant-chat%2F")
    return file_url(href)


def _tree_checks(page: Any) -> None:
    page.wait_for_selector("html[data-ready-tree]")
    source = page.locator('#tree-root > li[data-id="assistant-chat"]')
    source.locator(".trow").first.click()
    level = source.locator("li.kind-summary").first
    level.wait_for()
    assert source.locator("li.kind-summary .stale").count() >= 1  # the edited level is flagged
    level.locator(".trow").first.click()
    level.locator("li.kind-leaf").first.wait_for()
    assert level.locator("li.kind-leaf").count() >= 1


def _inert_checks(page: Any) -> None:
    """Memory that holds markup shows as text: no element made from it, no script run."""
    page.evaluate("location.hash = '#search'")
    page.fill("#search-q", "newsletter footer renders preview template leaking")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("html[data-ready-search]")
    text = page.inner_text("#search-results")
    assert XSS_IMG in text and XSS_SCRIPT in text
    # The newest leaves stay verbatim at the top of their source: open each one in the tree.
    page.evaluate("location.hash = '#tree'")
    fresh = page.locator('#tree-root > li[data-id="assistant-chat"] > .tchildren > ul > li.kind-leaf')
    fresh.first.wait_for()
    for i in range(fresh.count()):
        fresh.nth(i).locator(".trow").first.click()
    shown = page.inner_text('#tree-root > li[data-id="assistant-chat"]')
    assert XSS_IMG in shown and XSS_SCRIPT in shown
    page.evaluate("location.hash = '#today/2026-03-09'")
    page.wait_for_selector('html[data-ready-today="2026-03-09"]')
    assert page.evaluate("() => document.querySelectorAll('#main img, #main script').length") == 0
    assert page.evaluate("() => window.__xss") is None
    assert page.evaluate("() => window.vaultmem.blocked") == []


@pytest.mark.slow
def test_page_in_chromium_draws_every_panel_and_renders_memory_as_text(built: Vault, page: Any) -> None:
    with Dashboard(built, run_queue=False, embedder=FakeEmbedder()) as dash:
        refused = page.goto(f"http://127.0.0.1:{dash.port}/")
        assert refused.status == 403 and "forbidden" in page.inner_text("body")
        _open(page, dash.url, "graph")
        page.wait_for_selector('#open-obsidian[href^="obsidian:"]')
        assert page.get_attribute("#open-obsidian", "href") == "obsidian://open?path=" + quote(
            str(built.layout.root), safe=""
        )
        _graph_checks(page, _shown(Panels(built).graph()))
        page.evaluate("location.hash = '#heatmap'")
        heat = Panels(built).heatmap()
        _heatmap_checks(page, heat["first"], heat["last"])

        def fetched(href: str) -> str:
            response = page.request.get(f"http://127.0.0.1:{dash.port}/{href}")
            assert response.status == 200
            return str(response.text())

        page.evaluate("location.hash = '#search'")
        assert "Booked the ryokan" in _search_checks(page, fetched)
        page.evaluate("location.hash = '#tree'")
        _tree_checks(page)
        today = datetime.now(UTC).date().isoformat()
        page.evaluate(f"location.hash = '#today/{today}'")
        page.wait_for_selector(f'html[data-ready-today="{today}"]')
        assert page.locator("#commits details.commit").count() >= 1  # git is on: today's commits
        page.locator("#commits details.commit summary").first.click()
        assert page.locator("#commits pre.diff span.add").count() > 0
        _inert_checks(page)


@pytest.mark.slow
def test_run_ingest_in_chromium_queues_a_job(tmp_path: Path, page: Any) -> None:
    vault = build(tmp_path)
    with vault, Dashboard(vault, run_queue=False) as dash:
        _open(page, dash.url, "status")
        page.wait_for_selector('.source-row[data-source="inbox"] button.ingest-btn')
        page.click('.source-row[data-source="inbox"] button.ingest-btn')
        page.wait_for_selector('#queue-table tr[data-kind="ingest"]')
        assert page.inner_text('#queue-table tr[data-kind="ingest"] td.queued') == "1"
        assert "ingest of inbox queued" in page.inner_text("#status-flash")
        assert vault.jobs.by_kind()["ingest"]["queued"] == 1
        page.click("#compact-btn")
        page.wait_for_selector('#queue-table tr[data-kind="seal"]')
        assert vault.jobs.by_kind()["seal"]["queued"] >= 1
        # A git operation under way pauses every write: the status says so, and says again when it ends.
        git(vault.layout.root, "checkout", "-q", "--detach")
        page.wait_for_selector("#git-busy")
        assert "detached HEAD" in page.inner_text("#git-busy")
        git(vault.layout.root, "switch", "-q", "-")
        page.wait_for_selector("#git-busy", state="detached")


@pytest.mark.slow
def test_run_ingest_without_a_daemon_is_run_by_the_dashboard(tmp_path: Path, page: Any) -> None:
    vault = build(tmp_path)
    with vault, Dashboard(vault, embedder=FakeEmbedder()) as dash:
        _open(page, dash.url, "status")
        page.click('.source-row[data-source="inbox"] button.ingest-btn')
        # The runner works the queue: the note's leaf arrives and the runner says what it did.
        page.wait_for_selector("#runner-last:has-text('ran')")
        assert [x.source for x in vault.ls(source="inbox")] == ["inbox"]


@pytest.mark.slow
def test_read_only_dashboard_in_chromium_has_no_working_buttons(built: Vault, page: Any) -> None:
    with Dashboard(built, read_only=True, run_queue=False) as dash:
        _open(page, dash.url, "status")
        page.wait_for_selector("#compact-btn")
        assert page.is_disabled("#compact-btn")
        assert page.is_disabled('.source-row[data-source="inbox"] button.ingest-btn')
        status, _, _ = request(
            dash, "/api/compact", method="POST", headers={"X-Vaultmem-Token": dash.token}, body={}
        )
        assert status == 403


@pytest.mark.slow
def test_exported_file_opens_offline_with_the_same_views(built: Vault, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "audit.html"
    export_html(built, out)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
    context.set_default_timeout(DEADLINE_MS)
    asked: list[str] = []
    context.on("request", lambda r: asked.append(r.url))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        _open(page, out.as_uri(), "graph")
        snapshot = out.read_text(encoding="utf-8").split('id="vm-snapshot">')[1].split("</script>")[0]
        _graph_checks(page, _shown(json.loads(snapshot)["graph"]))
        page.evaluate("location.hash = '#heatmap'")
        heat = Panels(built).heatmap()
        _heatmap_checks(page, heat["first"], heat["last"])

        def opened(href: str) -> str:
            assert href.startswith("file:///")
            path = Path(unquote(urlsplit(href).path))
            assert path.is_file()
            return path.read_text(encoding="utf-8")

        page.evaluate("location.hash = '#search'")
        assert "Booked the ryokan" in _search_checks(page, opened)
        page.evaluate("location.hash = '#tree'")
        _tree_checks(page)
        _inert_checks(page)
        assert all(url.startswith(("file://", "data:", "about:")) for url in asked), asked
    finally:
        context.close()
    assert errors == [], errors


def test_chromium_is_installed_by_setup_not_at_run_time() -> None:
    """The justfile and CI install Debian's chromium; nothing downloads a browser (no playwright install)."""
    root = Path(__file__).resolve().parent.parent
    justfile = (root / "justfile").read_text(encoding="utf-8")
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    assert "apt-get install -y chromium" in justfile
    assert "playwright install" not in justfile + ci


# -- the review inbox (issue #20) -----------------------------------------------------------------------
def _with_proposal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Vault, str, str]:
    from vaultmem import detect

    monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
    # The moved deadline is a firm change, applied at once by default: here it must wait for a person.
    config = '[embed]\nmodel = "fake"\n\n[updates]\nauto_apply = false\n'
    vault = Vault.init(tmp_path / "rv", config, embedder=FakeEmbedder())
    old = vault.remember("The Tidepool launch deadline is 27 March.", ts="2024-03-01T09:00:00Z").ids[0]
    new = vault.remember("The Tidepool launch deadline moved to 3 April.", ts="2024-03-10T09:00:00Z").ids[0]
    vault.flush()
    vault.work()  # the detector job admission queued writes the proposal
    assert [p.new for p in vault.proposals()] == [new]
    return vault, old, new


def test_review_panel_lists_and_decides_over_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault, old, new = _with_proposal(tmp_path, monkeypatch)
    with vault, Dashboard(vault, run_queue=False, embedder=FakeEmbedder()) as dash:
        headers = {"X-Vaultmem-Token": dash.token}
        status, _, body = request(dash, "/api/review", headers=headers)
        [p] = json.loads(body)["proposals"]
        assert status == 200 and (p["old"], p["new"], p["key"]) == (old, new, new)
        assert "27 March" in p["old_text"] and "3 April" in p["new_text"]
        status, _, body = request(
            dash, "/api/review", method="POST", headers=headers, body={"key": new, "decision": "perhaps"}
        )
        assert status == 400 and "accept, reject or skip" in json.loads(body)["error"]
        status, _, body = request(
            dash, "/api/review", method="POST", headers=headers, body={"key": new, "decision": "accept"}
        )
        assert status == 200 and json.loads(body)["outcome"] == "accepted"
        assert vault.get(old).superseded_by == (new,) and vault.proposals() == []
        with pytest.raises(ReadOnlyVault):
            Panels(vault, actions=False).decide(new, "reject")


@pytest.mark.slow
def test_review_in_chromium_rejects_with_a_click(
    tmp_path: Path, page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, old, new = _with_proposal(tmp_path, monkeypatch)
    with vault, Dashboard(vault, run_queue=False, embedder=FakeEmbedder()) as dash:
        _open(page, dash.url, "review")
        page.wait_for_selector('html[data-ready-review="1"]')
        card = page.locator(f'article.proposal[data-key="{new}"]')
        assert "27 March" in card.inner_text() and "3 April" in card.inner_text()
        card.locator('button[data-decision="reject"]').click()
        page.wait_for_selector('html[data-ready-review="0"]')
        assert "rejected" in page.inner_text("#review-flash")
        assert vault.proposals() == [] and vault.get(old).superseded_by == ()


def test_a_days_digest_opens_a_notes_section_in_its_note(tmp_path: Path) -> None:
    """A note of the vault is indexed where it is (#15): its sections have no file of their own, so the
    day panel's digest links open the note."""
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        (vault.layout.root / "Travel").mkdir()
        (vault.layout.root / "Travel" / "Lisbon.md").write_text(
            "---\ndate: 2026-03-04\n---\n# Lisbon\n\n## Food\n\nPasteis de nata at Manteigaria.\n\n"
            "## Trams\n\nTram 28 from Martim Moniz before 9.\n",
            encoding="utf-8",
        )
        vault.read_notes(["Travel/Lisbon.md"])
        vault.flush()
        day = Panels(vault).day("2026-03-04")
        assert [c["path"] for c in day["digest"]["children"]] == ["Travel/Lisbon.md", "Travel/Lisbon.md"]
