"""Episodes and recipes: episode files, promotion of similar successful episodes (and none for dissimilar
ones), generalised steps, the LLM's recipe and its fallback, matching within its caps, success counts,
the cap on learned recipes, hand-written recipes, reindex and check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import ChatServer, Reply
from vaultmem import recipes
from vaultmem.embed import FakeEmbedder
from vaultmem.episodes import Episode, Step
from vaultmem.errors import InvalidInput, NodeNotFound
from vaultmem.recipes import Recipe
from vaultmem.vault import Vault

# The fake embedder is a hashed bag of words: these trains requests share most words (cosine 0.5-0.65),
# the dissimilar ones share none. The real model and its measured threshold: the slow test below.
FAKE = "[recipes]\nsimilarity = 0.45\n"
TRAINS = [
    ("Book a train ticket from Tokyo to Kyoto on 14 April", "Tokyo", "Kyoto", "2026-04-14"),
    ("Book a train ticket from Osaka to Nara on 2 May", "Osaka", "Nara", "2026-05-02"),
    ("Book a train ticket from Berlin to Hamburg on 9 June", "Berlin", "Hamburg", "2026-06-09"),
]
DISSIMILAR = [
    "Summarise the unread emails from the bank",
    "Water the tomatoes on the balcony",
    "Convert the invoice PDF to a spreadsheet",
]


def book(vault: Vault, request: str, a: str, b: str, day: str, *, success: bool = True) -> Any:
    return vault.record_episode(
        request,
        mode="agent",
        tools=[
            {"name": "search_trains", "args": {"from": a, "to": b, "date": day}},
            {"name": "book_ticket", "args": json.dumps({"train": "12:30", "class": "standard"})},
        ],
        outcomes=["3 trains found", "booked seat 12A"],
        success=success,
    )


@pytest.fixture
def fake(tmp_path: Path) -> Vault:
    return Vault.init(tmp_path / "v", FAKE, embedder=FakeEmbedder())


def test_an_episode_file_holds_the_structured_fields_and_reads_back(fake: Vault) -> None:
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0"
    record = fake.record_episode(
        "Send the weekly report to Ana", mode="agent", tools=["draft_email", {"tool": "send", "args": {"key": secret}}],
        outcomes=["drafted"], success=False, session="s1",
    )  # fmt: skip
    ep = record.episode
    assert record.outcome == "recorded" and record.recipe is None
    path = fake.layout.root / ep.path
    assert ep.path.startswith("episodes/") and ep.path.endswith(f"-{ep.id}.md") and len(ep.id) == 12
    text = path.read_text(encoding="utf-8")
    assert secret not in text and "[REDACTED:" in text
    assert "kind: episode" in text and "success: false" in text and "# Send the weekly report to Ana" in text
    assert [s.tool for s in ep.steps] == ["draft_email", "send"] and ep.steps[0].outcome == "drafted"
    listed = fake.episodes()
    assert [e.id for e in listed] == [ep.id] and listed[0].steps == ep.steps
    assert fake.episodes(success=True) == []
    with pytest.raises(InvalidInput, match="mode"):
        fake.record_episode("x", mode="two words", tools=[], outcomes=[], success=True)
    with pytest.raises(InvalidInput, match="outcomes"):
        fake.record_episode("x", mode="agent", tools=["a"], outcomes=["1", "2"], success=True)


def test_three_similar_successful_episodes_promote_one_recipe(fake: Vault) -> None:
    outcomes = [book(fake, *t).outcome for t in TRAINS]
    assert outcomes == ["recorded", "recorded", "promoted"]
    (recipe,) = fake.recipes()
    assert recipe.learned and recipe.success_count == 3 and recipe.fast_path
    assert set(recipe.trigger) >= {"book", "train", "ticket"}
    assert recipe.description == "Book a train ticket from <value> to <value> on <date>"
    assert recipe.steps == (
        "search_trains(date=<date>, from=<from>, to=<to>)",
        'book_ticket(class="standard", train="12:30")',  # the same in every episode: kept
    )
    assert len(recipe.episodes) == 3 and recipe.modes == ("agent",)
    text = (fake.layout.root / recipe.path).read_text(encoding="utf-8")
    for ep in fake.episodes():
        assert f"[[{Path(ep.path).stem}|" in text
    # A fourth similar one joins it; a failure elsewhere never makes a recipe.
    assert (
        book(fake, "Book a train ticket from Rome to Milan on 3 July", "Rome", "Milan", "2026-07-03").outcome
        == "joined"
    )
    assert fake.recipes()[0].success_count == 4
    assert fake.check().ok


def test_dissimilar_or_failed_episodes_promote_nothing(fake: Vault) -> None:
    for request in DISSIMILAR:
        assert (
            fake.record_episode(request, mode="agent", tools=["x"], outcomes=["ok"], success=True).recipe
            is None
        )
    for t in TRAINS:
        book(fake, *t, success=False)
    assert fake.recipes() == []


def test_generalise_replaces_concrete_values_and_keeps_the_shared_words() -> None:
    group = [
        Episode(f"e{n:011x}", f"episodes/x{n}.md", req, "agent",
                (Step("fetch", f"https://bank.example/{n}/statement.pdf"), Step("save", f"/home/mara/{n}/out.csv")),
                True, None)
        for n, req in enumerate([
            "Download the March statement from the bank and save it as CSV",
            "Download the April statement from the bank and save it as CSV",
            "Download the May statement from the bank and save it as CSV",
        ])
    ]  # fmt: skip
    vecs = np.eye(3, dtype=np.float32) + 0.5
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    draft = recipes.generalise(group, vecs)
    assert draft.trigger[:4] == ("download", "statement", "bank", "save")
    assert "<value>" in draft.description and "March" not in draft.description
    assert draft.steps == ("fetch: <url>", "save: <path>")


def test_the_models_recipe_and_its_fallback(tmp_path: Path, llm_server: ChatServer) -> None:
    good = {
        "title": "Book a train",
        "trigger": ["book", "train"],
        "description": "Book a train between two cities on a day.",
        "steps": ["search_trains(from=<city>, to=<city>, date=<date>)", "book_ticket(train=<train>)"],
    }
    llm_server.replies = [Reply(json.dumps(good)), Reply("I could not do it.")]
    config = FAKE + f'[llm]\nbase_url = "{llm_server.url}"\nmodel = "m"\ntimeout_s = 10.0\n'
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    records = [book(vault, *t) for t in TRAINS]
    assert records[-1].recipe is not None and records[-1].recipe.summariser == "llm:m"
    assert records[-1].recipe.steps == tuple(good["steps"])
    assert "Example 3: request:" in llm_server.requests[-1].json["messages"][1]["content"]
    for n, request in enumerate(DISSIMILAR[:1] * 3):
        vault.record_episode(
            f"{request} number {n}", mode="ask", tools=["mail"], outcomes=["ok"], success=True
        )
    junk = [r for r in vault.recipes() if r.summariser == "extractive"]
    assert len(junk) == 1 and junk[0].learned
    vault.close()


def recipe(
    name: str, trigger: Sequence[str], steps: int = 3, success: int = 0, description: str = ""
) -> Recipe:
    return Recipe(name, f"recipes/{name}.md", name.replace("-", " "), tuple(trigger),
                  description, tuple(f"step {i} of {name}: " + "x" * 60 for i in range(steps)), success)  # fmt: skip


def test_matching_respects_the_three_recipe_and_character_caps() -> None:
    many = [recipe(f"report-{i}", ["weekly report"], success=i) for i in range(6)]
    found = recipes.match("Please write the weekly report", many)
    assert len(found.hits) == 3 and found.chars <= 2000 and len(found.text) == found.chars
    assert [h.recipe.name for h in found.hits] == ["report-5", "report-4", "report-3"]  # most used first
    assert set(found.left_out) == {"report-2", "report-1", "report-0"}
    assert [h.recipe.fast_path for h in found.hits] == [True, True, True]
    long_ones = [recipe(f"long-{i}", ["weekly report"], steps=30) for i in range(3)]
    cut = recipes.match("weekly report please", long_ones)
    assert len(cut.hits) == 1 and cut.chars <= 2000 and cut.hits[0].text.endswith("(cut to fit)")
    assert "not yet" not in cut.text and "follow it with care" in cut.text  # fewer than 3 successes
    tight = recipes.match("weekly report", many, limit=5, max_chars=500)
    assert tight.chars <= 500 and len(tight.hits) >= 1


def test_triggers_first_then_overlap_on_names_and_descriptions() -> None:
    book_r = recipe(
        "book-train", ["book", "train", "ticket"], description="Book a train ticket between cities"
    )
    mail_r = recipe(
        "triage-inbox", ["triage"], description="Sort unread emails into folders and flag the urgent ones"
    )
    by_trigger = recipes.match("can you book me a train ticket to Paris", [book_r, mail_r])
    assert [(h.recipe.name, h.matched_by) for h in by_trigger.hits] == [("book-train", "trigger")]
    assert by_trigger.hits[0].score == pytest.approx(1.0)
    by_overlap = recipes.match("flag urgent unread emails", [book_r, mail_r])
    assert [(h.recipe.name, h.matched_by) for h in by_overlap.hits] == [("triage-inbox", "overlap")]
    assert recipes.match("water the garden", [book_r, mail_r]).hits == ()


def test_a_hand_written_recipe_is_matched_and_counted(fake: Vault) -> None:
    path = fake.layout.root / "recipes" / "weekly-report.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        "---\ntrigger: weekly report, status update\ntags: [work]\n---\n# Weekly report\n\n"
        "Collect what moved this week and send it to the team.\n\n## Steps\n\n1. list merged PRs\n"
        "2. summarise them in five bullets\n3. send to #team\n",
        encoding="utf-8",
    )
    found = fake.recipes_for("Can you do the status update for this week?")
    (hit,) = found.hits
    assert hit.recipe.name == "weekly-report" and not hit.recipe.learned and not hit.recipe.fast_path
    assert hit.recipe.steps == ("list merged PRs", "summarise them in five bullets", "send to #team")
    assert hit.recipe.description == "Collect what moved this week and send it to the team."
    for _ in range(3):
        fake.recipe_result("weekly-report", success=True)
    counted = fake.recipe_result("weekly-report", success=False)
    assert (counted.success_count, counted.failure_count, counted.fast_path) == (3, 1, True)
    after = path.read_text(encoding="utf-8")
    assert "tags: [work]\n" in after and "success_count: 3" in after and "3. send to #team\n" in after
    record = fake.record_episode(
        "status update", mode="agent", tools=["gh"], outcomes=["ok"], success=True, recipe="weekly-report"
    )
    assert record.outcome == "reported" and record.recipe is not None and record.recipe.success_count == 4
    with pytest.raises(NodeNotFound):
        fake.recipe_result("nope", success=True)


class AxesEmbedder:
    """Requests name the axes of their vector ("x y" is the unit vector between axes x and y): the
    cosines a test needs, exactly."""

    model_id = "axes-8"
    dim = 8

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split()[-2:]:
                if word.isdigit():
                    out[row, int(word)] += 1.0
            out[row] /= np.linalg.norm(out[row])
        return out


def test_a_grown_recipe_is_joined_only_by_what_resembles_a_third_of_its_episodes(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", FAKE, embedder=AxesEmbedder())  # type: ignore[arg-type]

    def ask(request: str) -> str:
        done = vault.record_episode(request, mode="agent", tools=["t"], outcomes=["ok"], success=True)
        return str(done.outcome)

    # Seven requests on axis 0 and two between axes 0 and 1 (cosine 0.71 to the rest): one recipe.
    outcomes = [ask(f"Plan task {n} axis 0") for n in range(3)]
    outcomes += [ask(f"Plan task {n} axes 0 1") for n in range(3, 5)]
    outcomes += [ask(f"Plan task {n} axis 0") for n in range(5, 9)]
    assert outcomes == ["recorded", "recorded", "promoted", *["joined"] * 6]
    (recipe,) = vault.recipes()
    assert len(recipe.episodes) == 9
    # Axis 1 alone is within the threshold (0.45) of the two 0-1 episodes only: 2 of 9 is not a third.
    assert ask("Plan task 10 axis 1") == "recorded"
    assert vault.recipes()[0].success_count == 9
    # Between axes 0 and 1 it resembles all nine: it joins.
    assert ask("Plan task 11 axes 0 1") == "joined"
    vault.close()


def test_learned_recipes_over_the_cap_are_archived_not_deleted(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", FAKE + "max_learned = 2\n", embedder=FakeEmbedder())
    tasks = [
        ["Book a train ticket from {} to Kyoto on Monday", "Tokyo", "Osaka", "Nagoya"],
        ["Summarise the unread emails from the {} team", "sales", "design", "legal"],
        ["Water the {} plants on the balcony this evening", "tomato", "basil", "pepper"],
    ]
    for template, *fills in tasks:
        for fill in fills:
            vault.record_episode(
                template.format(fill), mode="agent", tools=["t"], outcomes=["ok"], success=True
            )
        if len(vault.recipes()) == 1:
            vault.recipe_result(vault.recipes()[0].name, success=True)  # the first is the most used
    live = vault.recipes()
    every = vault.recipes(archived=True)
    assert len(live) == 2 and len(every) == 3
    (archived,) = [r for r in every if r.archived]
    assert archived.path.startswith("recipes/_archive/") and (vault.layout.root / archived.path).exists()
    assert all(h.recipe.archived is False for h in vault.recipes_for("unread emails team").hits)
    assert vault.check().ok
    vault.close()


def test_reindex_restores_episodes_recipes_and_sessions_from_the_files(fake: Vault) -> None:
    for t in TRAINS:
        book(fake, *t)
    fake.ingest_messages(
        [{"id": "1", "role": "user", "content": "I prefer aisle seats on trains.", "session": "s"}],
        source="chat",
    )
    fake.end_session("s")
    before = (fake.episodes(), fake.recipes(), fake.sessions(), fake.recipes_for("book a train"))
    root = fake.layout.root
    fake.close()
    for p in root.glob(".vaultmem/chunks.db*"):
        p.unlink()
    vault = Vault.open(root, embedder=FakeEmbedder())
    report = vault.reindex()
    assert report.memory_files == len(list(root.glob("core/*.md"))) + 3 + 1 + 1
    assert (vault.episodes(), vault.recipes(), vault.sessions(), vault.recipes_for("book a train")) == before
    assert vault.check().ok
    vault.close()


def test_check_reports_a_broken_recipe_and_a_stale_row(fake: Vault) -> None:
    for t in TRAINS:
        book(fake, *t)
    (r,) = fake.recipes()
    path = fake.layout.root / r.path
    path.write_text(path.read_text().replace("success_count: 3", "success_count: many"))
    problems = {(p.code, p.path) for p in fake.check().problems}
    assert ("invalid_file", r.path) in problems
    note = fake.layout.root / "episodes" / "notes-about-episodes.md"
    note.write_text("# My thoughts\n\nNot an episode: a person's note.\n")
    assert ("invalid_file", "episodes/notes-about-episodes.md") not in {
        (p.code, p.path) for p in fake.check().problems
    }


@pytest.mark.slow
def test_paraphrases_promote_with_minilm_and_the_measured_threshold(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v")  # the packaged all-MiniLM-L6-v2 and the default threshold
    similar = [
        "Book me a train from Tokyo to Kyoto on Friday",
        "Can you book a train ticket to Kyoto for Friday?",
        "Reserve a seat on the train to Osaka tomorrow",
    ]
    dissimilar = [
        "What's the weather in Lisbon?",
        "Translate this paragraph into German",
        "Order more coffee beans",
    ]
    for request in dissimilar:
        vault.record_episode(request, mode="agent", tools=["t"], outcomes=["ok"], success=True)
    assert vault.recipes() == []
    outcomes = [
        vault.record_episode(r, mode="agent", tools=["search_trains", "book_ticket"], outcomes=["ok", "ok"], success=True).outcome
        for r in similar
    ]  # fmt: skip
    assert outcomes[-1] == "promoted" and len(vault.recipes()) == 1
    assert vault.recipes_for("book a train to Nagoya").hits
    vault.close()
