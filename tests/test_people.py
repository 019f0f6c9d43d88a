"""Recall that knows whom a question is about (issue 19): a first-person question asked of a user/assistant
chat ranks the user's own turns up, and a question about two people gives each of them their own best hits.

Real files, real SQLite, the deterministic fake embedder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaultmem import Vault
from vaultmem.embed import FakeEmbedder
from vaultmem.search import first_person

# A user telling an assistant about two dentist visits; the assistant's long replies repeat the question's
# words far more often than the user's short reports do.
ASSISTANT_CHAT = [
    ("s1", "user", "Can you suggest how to prepare for a dentist appointment? I get nervous."),
    (
        "s1",
        "assistant",
        "Preparing for a dentist appointment: write down questions for the dentist, arrive early for the"
        " appointment, tell the dentist you are nervous, and book the dentist appointment in the morning so"
        " you do not worry all day. Many people find a dentist appointment easier with music.",
    ),
    ("s2", "user", "I went to my dentist appointment on Monday and got a filling."),
    (
        "s2",
        "assistant",
        "Glad the filling went well. After a dentist appointment with a filling, avoid hot drinks; most"
        " dentist offices schedule a follow-up dentist appointment within six months.",
    ),
    ("s3", "user", "Another dentist visit today, a cleaning this time."),
    (
        "s3",
        "assistant",
        "Regular cleanings are great. A dentist appointment every six months keeps teeth healthy; ask your"
        " dentist about the appointment reminders.",
    ),
]

# Two friends: Nate talks about movies all the time, Joanna mentions the one she saw once.
FRIENDS_CHAT = [
    ("s1", "Nate", "I watched the movie Inception again last night, what a movie."),
    ("s1", "Joanna", "Nice! I spent the day writing my screenplay."),
    ("s1", "Nate", "Movies like that make me want to see every Nolan movie."),
    ("s2", "Nate", "Saw the movie Dune at the cinema, best movie this year."),
    ("s2", "Joanna", "My allergies are bad this week."),
    ("s2", "Nate", "I rate movies on a list, Dune is my top movie now."),
    ("s3", "Joanna", "I finally saw Little Women, loved it."),
    ("s3", "Nate", "Another movie night with the turtles: we watched a movie about the sea."),
    ("s3", "Nate", "Every movie night I make popcorn for the movie."),
]


def _vault(tmp_path: Path, chat: list[tuple[str, str, str]], key: str) -> Vault:
    lines = [
        json.dumps(
            {
                "id": f"m{i}",
                key: who,
                "content": text,
                "session": session,
                "ts": f"2024-03-0{i + 1}T10:00:00Z",
            }
        )
        for i, (session, who, text) in enumerate(chat)
    ]
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vault = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    vault.ingest_path(tmp_path / "chat.jsonl", source="chat")
    vault.flush()
    return vault


@pytest.fixture
def assistant_chat(tmp_path: Path) -> Vault:
    return _vault(tmp_path, ASSISTANT_CHAT, "role")


@pytest.fixture
def friends_chat(tmp_path: Path) -> Vault:
    return _vault(tmp_path, FRIENDS_CHAT, "speaker")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("How many dentist appointments did I go to?", True),
        ("What did I say about my filling", True),
        ("Remind me when I've been to the dentist", True),
        ("What did you recommend for my dentist appointment?", False),  # asks what the assistant said
        ("How many dentist appointments did Nate go to?", False),
        ("Is it dentist day", False),
    ],
)
def test_first_person(query: str, expected: bool) -> None:
    assert first_person(query) is expected


def _texts(vault: Vault, query: str) -> list[str]:
    return [h.text for h in vault.search(query, k=6)]


def test_a_first_person_question_ranks_the_users_own_turns_up(assistant_chat: Vault) -> None:
    query = "How many dentist appointments did I go to?"
    hits = assistant_chat.search(query, k=6)  # the shipped setting
    assert [h.role for h in hits[:3]] == ["user"] * 3
    assistant_chat.searcher.first_person_boost = 0.0
    plain = _texts(assistant_chat, query)
    # Without the prior the user's terse report of the second visit ranks below every assistant reply.
    assert plain[-1].startswith("Another dentist visit")


def test_the_fused_first_person_prior_puts_the_users_best_match_first(assistant_chat: Vault) -> None:
    searcher = assistant_chat.searcher
    searcher.first_person_boost, searcher.first_person_fused = 1.0, True
    hits = assistant_chat.search("How many dentist appointments did I go to?", k=6)
    assert hits[0].role == "user"
    visit = next(n for n, h in enumerate(hits) if h.text.startswith("Another dentist visit"))
    assert visit < 5


def _texts_with(vault: Vault, query: str, **knobs: float) -> list[str]:
    """The top texts with the Searcher's ``knobs`` set first."""
    for name, value in knobs.items():
        setattr(vault.searcher, name, value)
    return _texts(vault, query)


def test_the_first_person_prior_leaves_a_question_to_the_assistant_alone(assistant_chat: Vault) -> None:
    query = "What did you recommend for my dentist appointment?"
    plain = _texts_with(assistant_chat, query, first_person_boost=0.0)
    assert _texts_with(assistant_chat, query, first_person_boost=1.0, first_person_fused=False) == plain


def test_the_first_person_prior_leaves_a_chat_between_named_people_alone(friends_chat: Vault) -> None:
    query = "What movie did I say I saw?"
    plain = _texts_with(friends_chat, query, first_person_boost=0.0)
    assert _texts_with(friends_chat, query, first_person_boost=4.0, first_person_fused=False) == plain


def test_a_question_about_two_people_gives_each_their_own_best_hit(friends_chat: Vault) -> None:
    query = "What movies have Joanna and Nate both seen?"
    searcher = friends_chat.searcher
    searcher.split_weight = 0.0
    # Nate's many movie turns crowd Joanna's one movie out of the top 6.
    assert "I finally saw Little Women, loved it." not in _texts(friends_chat, query)
    searcher.split_weight = 1.0
    assert "I finally saw Little Women, loved it." in _texts(friends_chat, query)


def test_the_split_leaves_a_question_about_one_person_alone(friends_chat: Vault) -> None:
    query = "What movies has Nate seen?"
    plain = _texts_with(friends_chat, query, split_weight=0.0)
    assert _texts_with(friends_chat, query, split_weight=2.0) == plain


def test_a_ranking_of_the_subjects_own_leaves_brings_theirs_into_a_small_pool(friends_chat: Vault) -> None:
    """``split_vector`` (off by default): the cosine ranking of the subject speaker's leaves alone, fused like
    feedback, reaches a leaf of hers that the whole vault's rankings leave out of a small pool."""
    query = "What has Joanna seen at the movies?"
    searcher = friends_chat.searcher
    searcher.split_vector = 0.0
    assert "I finally saw Little Women, loved it." not in [h.text for h in searcher.find(query, k=2, pool=2)]
    searcher.split_vector = 1.0
    assert "I finally saw Little Women, loved it." in [h.text for h in searcher.find(query, k=2, pool=2)]


def test_the_first_person_prior_lowers_the_replies_and_leaves_what_has_no_role_in_place(
    tmp_path: Path,
) -> None:
    """The prior lowers the assistant's replies rather than raising the user's turns: within the chat the
    same order, while a leaf without a role (a note, a document, a clinic's message) keeps its place
    beside the user's turns instead of falling below all of them ("what should I know before my trip?"
    should still find the trip's own note)."""
    vault = _vault(tmp_path, ASSISTANT_CHAT, "role")
    clinic = tmp_path / "clinic.jsonl"
    clinic.write_text(
        json.dumps(
            {
                "id": "c1",
                "speaker": "Smile Clinic",
                "content": "Reminder: your next dentist appointment is on Monday 14 April at 9:00.",
                "session": "c",
                "ts": "2024-03-10T10:00:00Z",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    vault.ingest_path(clinic, source="clinic")
    vault.flush()
    roles = {
        r["id"]: r["role"] for r in vault.conn.execute("SELECT id, role FROM chunks WHERE kind = 'leaf'")
    }
    note = next(i for i, role in roles.items() if role is None)
    users = sorted(i for i, role in roles.items() if role == "user")
    replies = sorted(i for i, role in roles.items() if role == "assistant")
    scores = {replies[0]: 0.9, note: 0.8, users[0]: 0.7, users[1]: 0.6, replies[1]: 0.5, users[2]: 0.4}
    vault.searcher._boost_speakers("When is my next dentist appointment?", scores, limit=10)
    order = sorted(scores, key=lambda i: -scores[i])
    assert order[:4] == [note, users[0], users[1], users[2]]  # the note still leads the user's turns
    assert set(order[4:]) == {replies[0], replies[1]}
    assert scores[note] == 0.8 and scores[users[0]] == 0.7  # only the replies moved


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Can you suggest some useful accessories for my phone?", True),  # advice on the user's situation
        ("I'm anxious about getting around Tokyo. Do you have any helpful tips?", True),
        ("I'm deciding whether to buy a NAS now or wait. What do you think?", True),
        ("Can you tell me what I ordered last week?", True),
        ("What was the name of that trail you recommended for my hike?", False),  # the assistant's words
        ("Can you remind me of the deli near my hotel?", False),  # back to the earlier chat
        ("I'm checking our previous chat about my shift rota, what was Admon's shift?", False),
        ("What did you suggest for my dinner?", False),
        ("Do you like your new job? I like mine", False),
        ("What did I tell you about my sister's wedding?", True),  # "you" hears the user's words
        ("Did I send you my CV?", True),
        ("What did you tell me about my CV?", False),
    ],
)
def test_first_person_takes_a_request_for_advice_and_not_a_question_about_what_was_said(
    query: str, expected: bool
) -> None:
    assert first_person(query) is expected
    # The rule before (requests off): only a question without "you" is the user's.
    assert first_person(query, requests=False) is ("you" not in query.lower().split())


# A user who has said once which phone they own; the assistant's replies talk about phone accessories at length.
PHONE_CHAT = [
    ("s1", "user", "I just got an iPhone 15 Pro as my phone, the camera is amazing."),
    ("s1", "assistant", "Congratulations on the new iPhone! Enjoy the camera."),
    ("s2", "user", "What is the weather like in Lisbon in May?"),
    (
        "s2",
        "assistant",
        "Useful accessories for a phone: a phone case, a phone charger, a phone stand, useful phone"
        " accessories like a power bank, and some useful accessories for a phone camera.",
    ),
]


def test_a_request_for_advice_about_the_users_phone_ranks_the_users_own_report_first(tmp_path: Path) -> None:
    vault = _vault(tmp_path, PHONE_CHAT, "role")
    query = "Can you suggest some useful accessories for my phone?"
    vault.searcher.first_person_requests = False
    assert vault.search(query, k=4)[0].role == "assistant"  # the reply that repeats the question's words
    vault.searcher.first_person_requests = True  # shipped
    assert vault.search(query, k=4)[0].text.startswith("I just got an iPhone 15 Pro")


# The user asks about a hike; the assistant names the trail. Another session has the user's own hike report.
HIKE_CHAT = [
    ("s1", "user", "I am going back to Moncayo park for a hike, my favourite park. Any trail for my hike?"),
    (
        "s1",
        "assistant",
        "I recommended the GR-90 trail: the GR-90 trail crosses Moncayo with panoramic views.",
    ),
    ("s2", "user", "My hike in Moncayo park was lovely, the trail was muddy on my hike."),
    ("s2", "assistant", "Glad you enjoyed it."),
]


def test_what_did_you_recommend_ranks_the_assistants_turn_first(tmp_path: Path) -> None:
    vault = _vault(tmp_path, HIKE_CHAT, "role")
    hits = vault.search("What was the trail you recommended for my hike in Moncayo park?", k=4)
    assert hits[0].text.startswith("I recommended the GR-90 trail")
    # The same words asked of the user's own doings do rank the user's turns first: the rule, not the
    # words, keeps the reply on top above.
    assert vault.search("What was the trail for my hike in Moncayo park?", k=4)[0].role == "user"


# The user asked for a recipe and got it; two other sessions have the user's own lasagna reports.
RECIPE_CHAT = [
    ("s1", "user", "Can you give me a recipe for lasagna? I want to get a good one."),
    (
        "s1",
        "assistant",
        "Classic lasagna recipe: layer pasta sheets with ragù and béchamel, top with mozzarella and"
        " parmesan, and bake for 45 minutes at 180 degrees.",
    ),
    ("s2", "user", "I made lasagna for the kids, they loved the lasagna."),
    ("s2", "assistant", "Lovely, a family lasagna night."),
    ("s3", "user", "Lasagna again today, I did get a lasagna at the deli."),
    ("s3", "assistant", "Deli food is handy on a busy day."),
    ("s4", "user", "My lasagna dish is too small."),
    ("s4", "assistant", "A bigger dish helps."),
]


def test_what_did_i_get_keeps_the_answer_to_the_users_best_matching_turn(tmp_path: Path) -> None:
    vault = _vault(tmp_path, RECIPE_CHAT, "role")
    query = "What recipe did I get for lasagna?"

    def recipe_rank() -> tuple[int, int]:
        """The recipe's rank, and the rank of the user's last-ranked turn."""
        hits = vault.search(query, k=6)
        recipe = next(n for n, h in enumerate(hits) if h.text.startswith("Classic lasagna recipe"))
        return recipe, max(n for n, h in enumerate(hits) if h.role == "user")

    vault.searcher.first_person_answer = 0
    recipe, last_user = recipe_rank()
    assert recipe > last_user  # every reply divided: the recipe falls below all the user's turns
    vault.searcher.first_person_answer = 1  # shipped: the question says "did I get"
    recipe, last_user = recipe_rank()
    assert recipe < last_user  # the answer the user's request got keeps its place among their turns
