"""The offline supersede detector (issue #20): a changed value of one attribute of one subject is an
update; the same speaker reporting two events with their own values, or two values of different
attributes of one subject, is not. Realistic chat turns and notes written for the test; the vault test
uses real files and SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vaultmem import detect
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault


def assert_update(old: str, new: str, cosine: float, *, why: str) -> detect.Judgement:
    """The new statement is judged an update of the old one, for the reason given (among others)."""
    found = detect.judge(old, new, cosine)
    assert found is not None, (old, new)
    assert why in found.why, found.why
    return found


def test_a_state_that_changes_is_an_update() -> None:
    rent = assert_update(
        "Ugh, paperwork day. My rent is 1,150 euros a month, due on the 1st.",
        "Heads up: the landlord wrote, my rent goes up to 1,250 euros a month from May.",
        0.7,
        why="value changed: 1,150 -> 1,250",
    )
    assert rent.confidence >= detect.PROPOSE_AT
    assert_update(
        "The team standup is at 9:30 every day on the Ops channel.",
        "FYI the team standup is at 10:00 from next week.",
        0.7,
        why="value changed: 9:30 -> 10:00",
    )
    assert_update(
        "Haul report: I've bought three tops from H&M this month.",
        "I've got five tops from H&M so far, need to stop!",
        0.6,
        why="counted again: tops",
    )


def test_two_events_with_their_own_values_are_not_an_update() -> None:
    """The false links the last detector made on real chats: the same speaker reporting what happened,
    twice, with new values."""
    assert (
        detect.judge(
            "Booked the train to Kyoto for the 11th, window seat.",
            "Booked the train to Nara for the 15th too, it leaves at 9:10.",
            0.8,
        )
        is None
    )
    assert (
        detect.judge(
            "I caught 7 largemouth bass on my trip to Lake Michigan with Alex on 7/10 - great day!",
            "We were there with Alex on 7/22 - we caught 9 largemouth bass that day.",
            0.8,
        )
        is None
    )
    assert (
        detect.judge(
            "Rehearsed the Postgres 15 → 16 upgrade on staging last night: 4 minutes for 38 GB.",
            "Upgraded prod from 15 on 19 March with `pg_upgrade --link`: 6 minutes, 11 minutes of downtime.",
            0.8,
        )
        is None
    )
    # An event that says the state changed is one.
    assert_update(
        "I live in Berlin with my partner.",
        "We moved to Lisbon last month, I live there now.",
        0.6,
        why="value changed: Berlin -> Lisbon",
    )


def test_values_of_different_attributes_are_not_an_update() -> None:
    """One subject, many facts: a handover note and a cutover plan share the service and the people
    but no value of one attribute changes between them."""
    handover = (
        "On-call handover → @Diego for the weekend (Fri 17:00 – Mon 09:00 Lisbon):\n"
        "• Tidepool v0.9.3 is stable, no open incidents\n"
        "• Prod cutover stays Thursday 19 March 07:00.\n"
        "• Runbook: tidepool-runbook.md. Escalation: me, then Priya"
    )
    steps = (
        "Steps:\n"
        "1. 06:45 disk snapshot of db-primary (our only rollback once 16 has started)\n"
        "2. 07:00 maintenance banner on, scale tidepool-api and tidepool-worker to 0\n"
        "3. pg_upgrade --check, then pg_upgrade --link (4 minutes on staging, 38 GB)\n"
        "6. rebuild db-replica from the new primary (Priya)\n\n"
        "We stay on the Debian 11 image so glibc does not change in the same step."
    )
    assert detect.judge(handover, steps, 0.76, shared_entities=5) is None
    env = "```sh\nHTTP_PORT=8080\nWEBHOOK_PORT=8081\nMETRICS_PORT=9090\n```"
    components = "- `tidepool-api`: HTTP API, port 8080\n- Metrics on port 9090 (`/metrics`) for both"
    assert detect.judge(env, components, 0.83) is None
    assert detect.judge(components, env, 0.83) is None


def test_a_statement_reads_its_values_in_context() -> None:
    [tops] = [v for v in detect.statement_values("I've already bought three tops from H&M") if v.unit]
    assert (tops.text, tops.kind, tops.unit, tops.event) == ("3", "count", "top", False)
    [bass] = detect.statement_values("we caught 9 largemouth bass that day")
    assert bass.event and bass.unit == "largemouth"
    [date] = detect.statement_values("the deadline is 27 March")
    assert (date.text, date.kind) == ("27 march", "date")
    # Bullets, hard-wrapped mail lines and code blocks.
    assert detect.statements(
        "Plan:\n- one thing\n- another\n\nThe provider retires\nour class.\n```\nx=1\n```"
    ) == [
        "Plan:",
        "one thing",
        "another",
        "The provider retires our class.",
    ]
    # Chinese sentences end at 。！？ with no space after them: each is its own statement.
    assert detect.statements("会议改到周五了。房间还是第12号！你来吗？") == [
        "会议改到周五了。",
        "房间还是第12号！",
        "你来吗？",
    ]


def test_an_undated_note_and_a_later_turn_are_judged_one_way_only(tmp_path: Path) -> None:
    """Of two leaves where one has no time (a hand-written note), only the one indexed later may update
    the other: never a proposal each way."""
    v = Vault.init(tmp_path / "vault", '[embed]\nmodel = "fake"\n', embedder=FakeEmbedder())
    try:
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "team.md").write_text(
            "# Team\n\nThe team standup is at 9:30 every day on the Ops channel.\n", encoding="utf-8"
        )
        v.ingest_path(tmp_path / "notes", source="notes")
        v.remember(
            "FYI the team standup is at 10:00 from next week.", ts="2024-03-10T09:00:00Z", source="chat"
        )
        v.flush()
        out = v.propose_updates()
        pairs = {(p.old, p.new) for p in out["proposed"]}
        assert len(pairs) == 1 and not {(b, a) for a, b in pairs} & pairs
    finally:
        v.close()


def test_a_number_after_a_label_names_a_thing_it_does_not_count() -> None:
    """ "build 1001" is one build, not 1001 of something: two builds (or rooms, flights) in two messages
    are two things, not a changed count; an identifier still changes when the message says so."""
    builds = detect.statement_values(
        "Reminder: the deploy of build 1001 moves to Thursday morning, never Friday."
    )
    assert next((v.text, v.kind) for v in builds) == ("1001", "id")
    assert (
        detect.judge(
            "Reminder: the deploy of build 1001 moves to Thursday morning, never Friday.",
            "Reminder: the deploy of build 1005 moves to Thursday morning, never Friday.",
            0.95,
        )
        is None
    )
    # Another value said of another numbered thing is not a change either.
    assert detect.judge("Room 12 is booked for 3pm.", "Room 14 is booked for 4pm.", 0.9) is None
    assert (
        detect.judge(
            "The deploy of build 1001 is on Thursday morning.",
            "The deploy of build 1005 is on Friday morning.",
            0.9,
        )
        is None
    )
    # The same build moved, and an identifier replaced in so many words, are updates.
    assert_update(
        "The deploy of build 1001 is on Thursday morning.",
        "The deploy of build 1001 moved to Friday morning.",
        0.9,
        why="value changed: Thursday -> Friday",
    )
    assert_update(
        "We are on build 1001 in production.",
        "We switched production to build 1005 this morning.",
        0.9,
        why="value changed: 1001 -> 1005",
    )
    # A number before the noun still counts: "2 bikes" -> "4 bikes".
    assert_update(
        "I have 2 bikes in the garage.", "I have 4 bikes in the garage now.", 0.9, why="counted again: bikes"
    )


def test_a_question_or_a_plan_holds_no_value_to_replace() -> None:
    """What a person asks for or plans ("a 20-minute workout", "a 10-minute one") is no fact that holds:
    measured on LongMemEval, such pairs were most of the false proposals. A question that tells a fact
    ("You know, the one where I ran 26 minutes?") still counts, and so does a plan said to have changed."""
    assert (
        detect.judge(
            "I'm planning a 20 minute morning workout routine, can you suggest some exercises?",
            "Could you put together a 10 minute morning workout routine with no equipment?",
            0.8,
        )
        is None
    )
    assert (
        detect.judge(
            "My budget for the anniversary dinner is $150, any restaurant ideas?",
            "What would a $80 dinner look like at a place near the harbour?",
            0.7,
        )
        is None
    )
    assert_update(
        "I ran the charity 5K last month, my personal best is 27 minutes.",
        "You know, the one where I finished with a personal best time of 26 minutes?",
        0.7,
        why="value changed: 27 -> 26",
    )
    assert_update(
        "I'm planning the team offsite for 12 May in Porto.",
        "The team offsite moved to 19 May, same place in Porto.",
        0.8,
        why="says it changed (moved)",
    )


def test_a_value_only_supposed_or_planned_replaces_nothing() -> None:
    """The sample vault's proposal at confidence 1.00: a runbook saying the image stays on Debian 11 "for
    now" and what moving to Debian 12 would change, read as a change 11 -> 12. A value replaces another
    only when its statement asserts it; a conditional, a modal, a change still to come or a change
    spoken of in general asserts nothing, and the old value said to hold in the new text still holds."""
    handover = (
        "Prod cutover stays Thursday 19 March 07:00. We keep the Debian 11 image so glibc (and "
        "collation) doesn't change in the same step"
    )
    runbook = (
        "- The image stays on Debian 11 (glibc 2.31) for now. Moving to Debian 12 changes glibc to 2.36:\n"
        "  before that, run `REINDEX DATABASE tidepool;`."
    )
    assert detect.judge(handover, runbook, 0.74) is None
    for plan in (
        "Moving to Debian 12 changes glibc to 2.36, so reindex first.",
        "If we move the image to Debian 12, glibc changes to 2.36.",
        "We will move the image to Debian 12 next month.",
        "We'd move the image to Debian 12 once the reindex is done.",
        "Once we move the image to Debian 12 we need a reindex.",
    ):
        assert detect.judge(handover, plan, 0.75) is None, plan
    for done in (
        "We moved the image to Debian 12 last night, glibc is 2.36 now.",
        "Moving the image to Debian 12 was painless: it is on Debian 12 now.",
    ):
        found = detect.judge(handover, done, 0.75)
        assert found is not None and "value changed: 11 -> 12" in found.why, done


def test_a_value_inside_a_range_or_already_in_the_old_text_is_no_change() -> None:
    """One page at 02:14 of an alert said to flap "between 02:00 and 02:30" is a case of it; a hotel mail's
    "2 nights" against a budget that already lists "Ryokan, 2 nights" next to "3 nights" elsewhere is
    no change of 3 into 2."""
    assert (
        detect.judge(
            "Known noise: HighDBLatency flaps between 02:00 and 02:30 during the nightly vacuum, safe to ack",
            "Handing the pager back: one page on Saturday at 02:14 (HighDBLatency, the vacuum flap), acked.",
            0.6,
        )
        is None
    )
    budget = (
        "- Ryokan, 2 nights with dinner and breakfast: €470\n- Kyoto business hotel, 3 nights at €70: €210"
    )
    mail = "Room charge: ¥38,000 per night x 2 nights = ¥76,000 (consumption tax included)"
    assert detect.judge(budget, mail, 0.6) is None
    # Still a change: the range itself moves, and a count with its attribute.
    assert_update(
        "The team standup is at 9:30 every day.",
        "FYI the team standup is now at 10:00 every day.",
        0.7,
        why="value changed: 9:30 -> 10:00",
    )
    assert_update(
        "We keep two cargo bikes in the shed.",
        "We keep four cargo bikes in the shed now.",
        0.7,
        why="value changed: two -> four",
    )


def test_a_name_where_a_change_was_made_is_not_what_it_became() -> None:
    """ "updated in Vault" says where the key was changed, not that something became "Vault"; "switched
    to Lidl" says what it became."""
    assert (
        detect.judge(
            "Each restart is ~40 s of CrashLoopBackOff, so we drop Payflow webhooks in those windows",
            "Rotated in the Payflow dashboard and updated in Vault; the old key was revoked at 08:19 UTC.",
            0.3,
        )
        is None
    )
    assert_update(
        "I do the weekly grocery run at Aldi on Saturdays.",
        "I switched the weekly grocery run to Lidl, Saturdays still.",
        0.7,
        why="value changed: Aldi -> Lidl",
    )


def test_chinese_numbers_that_name_a_thing_are_identifiers() -> None:
    """第12号, 12号房 and 版本 3 name one thing (a number after 第 or a label noun, or before 号); two of
    them in two messages are two things. A count with its classifier (12间房, twelve rooms) stays a
    count, and the same numbered room changing its time is still an update."""
    kinds = {
        s: [(v.text, v.kind) for v in detect.statement_values(s)]
        for s in ("我住在第12号房间", "会议在12号房", "现在是版本 3 了", "我们有12间房")
    }
    assert kinds == {
        "我住在第12号房间": [("12", "id")],
        "会议在12号房": [("12", "id")],
        "现在是版本 3 了": [("3", "id")],
        "我们有12间房": [("12", "count")],
    }
    for old, new in (
        ("第12号 deploy window is at 15:00 on Thursday.", "第14号 deploy window is at 16:00 on Thursday."),
        ("版本 3 的 release date is 12 May.", "版本 4 的 release date is 20 May."),
        ("12号房 check-in is at 15:00, check-out 11:00.", "14号房 check-in is at 16:00, check-out 11:00."),
    ):
        assert detect.judge(old, new, 0.9) is None, new
    assert_update(
        "12号房 check-in is at 15:00.",
        "12号房 check-in moved to 16:00.",
        0.9,
        why="value changed: 15:00 -> 16:00",
    )


def test_values_of_two_slots_of_the_same_kind_are_not_an_update() -> None:
    """The sample vault's two wrong proposals and a price shape: a time on another day is another
    happening (the outbound flight's 06:15 against the return's 11:05, the day given by the old note's
    heading), a count of nights may be two stays, two amounts said of two things are two prices. The
    same shapes with the slot in common (or a stated change) still are updates."""
    offer = (
        "Kyoto planning time. Flights: Lufthansa via Frankfurt, Lisbon Sat 11 April 06:15 → Haneda Sun 12"
        " April 09:40, back Sun 19 April. €890 return. Book it?"
    )
    home = "### Kyoto, April 2026 › Itinerary › Sun 19 April: home\n\nKeikyu to Haneda, flight at 11:05."
    assert detect.judge(home, offer, 0.69, shared_entities=1) is None
    moved = "Lufthansa wrote: the flight to Haneda on Sun 19 April moved to 13:20."
    assert_update(home, moved, 0.7, why="value changed: 11:05 -> 13:20")
    stay = (
        "### Kyoto, April 2026 › Itinerary › Wed 15 – Fri 17 April: Kyoto\n\n"
        "Check out of the ryokan, move to the business hotel near Kyoto Station (3 nights)."
    )
    mail = (
        "Room charge: ¥38,000 per night x 2 nights = ¥76,000 (consumption tax included)\n"
        "Kyoto City accommodation tax is not included and is payable in cash at check-in."
    )
    assert detect.judge(stay, mail, 0.6, shared_entities=1) is None
    assert_update(
        "We booked the business hotel near Kyoto Station for 3 nights.",
        "We extended the business hotel near Kyoto Station to 4 nights now.",
        0.8,
        why="value changed: 3 -> 4",
    )
    assert detect.judge("The blender at Target costs $45.", "The toaster at Target costs $30.", 0.7) is None
    assert detect.judge("My gym membership is $40 a month.", "My phone plan is $25 a month.", 0.7) is None
    assert_update(
        "I pay $120 for car insurance every month.",
        "My car insurance is $140 a month.",
        0.7,
        why="value changed: $120 -> $140",
    )


def test_instead_replaces_a_value_or_compares_two_options() -> None:
    """ "Instead" alone, or "instead of" the old value, says the value changed; "instead of" something
    else of the old statement compares two options, and the new value is the other option's."""
    assert_update(
        "We're flying to Lisbon on the 12th.",
        "We're flying to Porto instead, same day.",
        0.7,
        why="says it changed (instead)",
    )
    assert_update(
        "The team meeting is at 3pm on Friday.",
        "The team meeting is at 4pm instead of 3pm on Friday.",
        0.7,
        why="value changed: 3pm -> 4pm",
    )
    fare = "Took the train instead of the bus today, the fare was €12."
    assert detect.judge("The bus fare to work is €8 each way.", fare, 0.7) is None


def test_capitalised_step_words_and_used_to_are_read_by_their_place() -> None:
    """A word capitalised because it opens a step ("Step 4: Check the seals") is no name that changes
    into another ("Replace"); "used to" after "be"/"get" or before an -ing word ("is used to track",
    "was used to getting up") is not the past of a habit, so it says nothing changed."""
    assert (
        detect.judge(
            "- Step 4: Check the seals on the door.", "- Step 4: Replace the seals on the door now.", 0.8
        )
        is None
    )
    assert (
        detect.judge(
            "Step 1 – Check the pressure valve.", "Step 1 – Order a new pressure valve instead.", 0.8
        )
        is None
    )
    assert [v.kind for v in detect.statement_values("Step 4: Check the seals with Priya")] == ["id", "name"]
    assert (
        detect.judge("I get up at 6:00 for work.", "At the bakery I was used to getting up at 5:00.", 0.7)
        is None
    )
    assert detect._cue("The spare room is used to store 4 bikes.", "The spare room has 2 desks.") == ""
    habit = detect.judge(
        "I get up at 6:00 for work.", "I used to get up at 5:00 for work, now it's 6:30.", 0.7
    )
    assert habit is not None and habit.confidence >= detect.PROPOSE_AT


def test_now_after_a_span_and_starting_an_activity_say_nothing_changed() -> None:
    """Shapes of the false proposals on LongMemEval haystacks: "now" after a span ("for six weeks now")
    says how long something has held, "for now" is a pause; "starting" is a change only when a time
    follows ("starting Monday"), not an activity ("starting with Yoga With Adriene")."""
    old = "I was thinking of trying out yoga or Pilates at home."
    new = "I'm thinking of starting with Yoga With Adriene on YouTube since it's free."
    assert detect._cue(new, old) == ""
    assert detect._cue("Starting Monday the gym opens at 7:00.", "The gym opens at 6:00.") == "starting"
    assert detect._cue("I've been taking comedy classes on Tuesdays for 6 weeks now.", "x") == ""
    assert detect._cue("No, I think that's all for now.", "x") == ""
    assert detect._cue("I live in Porto now.", "I live in Lisbon.") == "now"
    netflix = "I'm trying to find some new stand-up comedy specials to watch on Netflix."
    classes = "I've been taking stand-up comedy classes on Tuesdays for 6 weeks now, it's been a blast."
    assert detect.judge(netflix, classes, 0.44) is None


def test_a_name_counts_only_where_the_change_word_says_it_changed() -> None:
    # The change word is another's: "increased" says the travel grew, not that Hawaiian became Gold.
    assert (
        detect.judge(
            "I'm flying from LAX to HNL and I've been considering Hawaiian Airlines.",
            "Alaska Airlines upgraded me to MVP Gold status due to my increased travel this quarter.",
            0.7,
        )
        is None
    )
    # "used to" far from the name, in a long clause: a word of another thing.
    assert (
        detect.judge(
            "Diwali marks the return of Lord Rama to Ayodhya after his exile.",
            "My parents used to tell me that it's a festival of lights and that we light diyas to welcome "
            "Goddess Lakshmi, not about Lord Rama.",
            0.8,
        )
        is None
    )
    # The same names, the change word right before or after them: updates.
    assert_update(
        "Priya lives in Berlin.",
        "Priya moved to Lisbon last month.",
        0.7,
        why="value changed: Berlin -> Lisbon",
    )
    assert_update(
        "We fly to Porto on the 3rd.",
        "We fly to Lisbon instead, same day.",
        0.7,
        why="value changed: Porto -> Lisbon",
    )


def test_requests_intentions_and_questions_hold_no_value() -> None:
    # A request: what to write, not what holds.
    assert (
        detect.judge(
            "Write a 2000 word article on nitrogen fertilizer and carbon capture.",
            "Write a 1000 words article with the above outline.",
            0.7,
        )
        is None
    )
    # An intention ("I'll try to stick to"), said after a habit.
    assert (
        detect.judge(
            "I've been trying to read for at least 20 minutes before bed.",
            "I'll try to stick to the 10-minute reading limit before bed.",
            0.8,
        )
        is None
    )
    # "I'll have four bikes with me" says what will hold: still an update of "two bikes".
    assert_update(
        "I've been riding it along with my other two bikes.",
        "I just got a new one, so I'll have four bikes with me on this trip.",
        0.6,
        why="value changed: two -> four",
    )
    # "instead" in a question or in a plan: nothing changed yet.
    old = "Can you schedule tasks from 9:00 am? I usually start my most important task at 9:00 am."
    assert (
        detect.judge(old, "Is there a way so I can start my most important task at 9:15 am instead?", 0.8)
        is None
    )
    assert (
        detect.judge(
            "I'm going to visit the Tsukiji Fish Market, it opens early.",
            "I'm actually thinking of visiting the Tsukiji Outer Market instead of the Toyosu Market.",
            0.7,
        )
        is None
    )
    assert_update(
        old, "I start my most important task at 9:15 am instead.", 0.8, why="value changed: 9:00 -> 9:15"
    )


def test_only_the_strongest_evidence_reaches_the_auto_apply_tier() -> None:
    # A change word, one slot, one subject: may apply at once.
    firm = assert_update(
        "I've already bought three tops from H&M, loving the summer collection.",
        "I've got five tops from H&M so far, need to stop!",
        0.9,
        why="value changed: three -> five",
    )
    assert firm.confidence >= detect.AUTO_APPLY_AT
    # The same change without a change word: a proposal, however close the two texts are.
    plain = assert_update(
        "I've bought three tops from H&M this month.",
        "I've bought five tops from H&M this month.",
        0.95,
        why="value changed: three -> five",
    )
    assert detect.PROPOSE_AT <= plain.confidence <= detect.FIRM_BELOW < detect.AUTO_APPLY_AT
    # Two subjects: one named, the other not ("Jan" reads as a month): capped too.
    other = detect.judge(
        "Masha's dentist appointment is on 2 March.", "The dentist appointment moved to 27 March.", 0.9
    )
    assert other is not None and other.confidence <= detect.FIRM_BELOW
    same = detect.judge(
        "Masha's dentist appointment is on 2 March.", "Masha's dentist appointment moved to 27 March.", 0.9
    )
    assert same is not None and same.confidence >= detect.AUTO_APPLY_AT


PAIRS = Path(__file__).parent / "data" / "detect_pairs.json"


def _judged(texts: list[str], row: list[Any]) -> list[Any] | None:
    """One row of ``PAIRS`` (old, new, cosine, same_speaker, shared_entities, other_people, verdict) judged
    now: [confidence, why] or None. After a change of the detector's rules that is meant, the verdicts are
    written again with this (the texts and pairs stay)."""
    old, new, cosine, same_speaker, shared, other = row[:6]
    found = detect.judge(
        texts[old], texts[new], cosine, same_speaker=same_speaker, shared_entities=shared, other_people=other
    )
    return None if found is None else [found.confidence, list(found.why)]


@pytest.fixture
def read_afresh() -> None:
    """No text read before this test (``detect.READ_CACHE``)."""
    for cached in (detect._read, detect._statement, detect._people):
        cached.cache_clear()


@pytest.mark.usefixtures("read_afresh")
def test_reading_each_text_once_keeps_every_verdict() -> None:
    """2,505 pairs of realistic texts (this file's, the entity gold sets', bench/updates.py's synthetic
    facts), each text with its nearest by shared words, were judged by the detector before it read each
    text once (main 9d1ca95). The same verdicts, confidences and reasons now: with every text read for
    the first time, then again with all of them kept."""
    data = json.loads(PAIRS.read_text(encoding="utf-8"))
    texts, pairs = data["texts"], data["pairs"]
    assert sum(row[6] is not None for row in pairs) == 148  # the pin covers real verdicts, not only None
    for _ in range(2):
        assert [row for row in pairs if _judged(texts, row) != row[6]] == []


@pytest.mark.usefixtures("read_afresh")
def test_a_text_judged_against_many_is_cut_and_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    values = detect.statement_values

    def counted(sentence: str) -> list[detect.Value]:
        read.append(sentence)
        return values(sentence)

    monkeypatch.setattr(detect, "statement_values", counted)
    old = "The team standup is at 9:30 every day on the Ops channel. Priya runs it."
    news = [f"FYI the team standup is at {t} from next week." for t in ("10:00", "10:15", "10:30")]
    verdicts = [detect.judge(old, new, 0.7) for new in news]
    assert all(v is not None and v.why[0].startswith("value changed: 9:30 ->") for v in verdicts)
    assert sorted(read) == sorted(
        ["The team standup is at 9:30 every day on the Ops channel.", "Priya runs it.", *news]
    )
