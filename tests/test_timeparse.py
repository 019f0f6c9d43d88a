"""Time phrases: every English and Chinese phrase gives its exact window, and near misses give None."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vaultmem.timeparse import TimeRange, asks_time, day_of, find_range, strip_range

SAT = datetime(2026, 11, 21, 15, 0, tzinfo=UTC)  # Saturday, ISO week Mon 16 .. Sun 22 November
WED = datetime(2026, 3, 11, 9, 30, tzinfo=UTC)  # Wednesday, ISO week Mon 9 .. Sun 15 March


def days(first: str, last_exclusive: str) -> tuple[datetime, datetime]:
    return (
        datetime.combine(date.fromisoformat(first), time(), UTC),
        datetime.combine(date.fromisoformat(last_exclusive), time(), UTC),
    )


# query -> (start, end) relative to SAT
SAT_CASES: dict[str, tuple[str, str]] = {
    "what did we talk about today": ("2026-11-21", "2026-11-22"),
    "earlier today": ("2026-11-21", "2026-11-22"),
    "this morning": ("2026-11-21", "2026-11-22"),
    "tonight": ("2026-11-21", "2026-11-22"),
    "yesterday": ("2026-11-20", "2026-11-21"),
    "Yesterday afternoon": ("2026-11-20", "2026-11-21"),
    "last night": ("2026-11-20", "2026-11-21"),
    "the day before yesterday": ("2026-11-19", "2026-11-20"),
    "tomorrow": ("2026-11-22", "2026-11-23"),
    "this week": ("2026-11-16", "2026-11-23"),
    "LAST WEEK": ("2026-11-09", "2026-11-16"),
    "next week": ("2026-11-23", "2026-11-30"),
    "this month": ("2026-11-01", "2026-12-01"),
    "last month": ("2026-10-01", "2026-11-01"),
    "this year": ("2026-01-01", "2027-01-01"),
    "last year": ("2025-01-01", "2026-01-01"),
    "last weekend": ("2026-11-14", "2026-11-16"),
    "this weekend": ("2026-11-21", "2026-11-23"),
    "3 days ago": ("2026-11-18", "2026-11-19"),
    "a day ago": ("2026-11-20", "2026-11-21"),
    "two weeks ago": ("2026-11-02", "2026-11-09"),
    "a week ago": ("2026-11-09", "2026-11-16"),
    "3 months ago": ("2026-08-01", "2026-09-01"),
    "a year ago": ("2025-01-01", "2026-01-01"),
    "on Tuesday": ("2026-11-17", "2026-11-18"),
    "last Tuesday": ("2026-11-17", "2026-11-18"),
    "this Tuesday": ("2026-11-17", "2026-11-18"),
    "next Tuesday": ("2026-11-24", "2026-11-25"),
    "on Saturday": ("2026-11-21", "2026-11-22"),
    "last Saturday": ("2026-11-14", "2026-11-15"),
    "this Sunday": ("2026-11-22", "2026-11-23"),
    "in May": ("2026-05-01", "2026-06-01"),
    "in December": ("2025-12-01", "2026-01-01"),
    "November": ("2026-11-01", "2026-12-01"),
    "May 2023": ("2023-05-01", "2023-06-01"),
    "in May of 2023": ("2023-05-01", "2023-06-01"),
    "Dec 2023": ("2023-12-01", "2024-01-01"),
    "2023-05-08": ("2023-05-08", "2023-05-09"),
    "8 May 2023": ("2023-05-08", "2023-05-09"),
    "May 8, 2023": ("2023-05-08", "2023-05-09"),
    "may 8 2023": ("2023-05-08", "2023-05-09"),
    "May 8th": ("2026-05-08", "2026-05-09"),
    "on the 8th of May": ("2026-05-08", "2026-05-09"),
    "Dec 25": ("2025-12-25", "2025-12-26"),
    "in 2023": ("2023-01-01", "2024-01-01"),
    "during the year 1999": ("1999-01-01", "2000-01-01"),
    "今天": ("2026-11-21", "2026-11-22"),
    "昨天我们聊了什么": ("2026-11-20", "2026-11-21"),
    "前天": ("2026-11-19", "2026-11-20"),
    "明天": ("2026-11-22", "2026-11-23"),
    "本周": ("2026-11-16", "2026-11-23"),
    "这周": ("2026-11-16", "2026-11-23"),
    "这个星期": ("2026-11-16", "2026-11-23"),
    "上周": ("2026-11-09", "2026-11-16"),
    "上个星期": ("2026-11-09", "2026-11-16"),
    "上星期": ("2026-11-09", "2026-11-16"),
    "下周": ("2026-11-23", "2026-11-30"),
    "上周三我们聊了什么": ("2026-11-11", "2026-11-12"),
    "周三": ("2026-11-18", "2026-11-19"),
    "星期三": ("2026-11-18", "2026-11-19"),
    "礼拜三": ("2026-11-18", "2026-11-19"),
    "星期天": ("2026-11-15", "2026-11-16"),
    "下周一": ("2026-11-23", "2026-11-24"),
    "上周末": ("2026-11-14", "2026-11-16"),
    "本月": ("2026-11-01", "2026-12-01"),
    "这个月": ("2026-11-01", "2026-12-01"),
    "上个月": ("2026-10-01", "2026-11-01"),
    "上月": ("2026-10-01", "2026-11-01"),
    "今年": ("2026-01-01", "2027-01-01"),
    "去年": ("2025-01-01", "2026-01-01"),
    "3天前": ("2026-11-18", "2026-11-19"),
    "三天前": ("2026-11-18", "2026-11-19"),
    "十天前": ("2026-11-11", "2026-11-12"),
    "两周前": ("2026-11-02", "2026-11-09"),
    "两个星期前": ("2026-11-02", "2026-11-09"),
    "2个月前": ("2026-09-01", "2026-10-01"),
    "十二个月前": ("2025-11-01", "2025-12-01"),
    "2023年5月8日": ("2023-05-08", "2023-05-09"),
    "5月8日": ("2026-05-08", "2026-05-09"),
    "5月8号": ("2026-05-08", "2026-05-09"),
    "2023年5月": ("2023-05-01", "2023-06-01"),
    "5月": ("2026-05-01", "2026-06-01"),
    "12月": ("2025-12-01", "2026-01-01"),
    "十一月": ("2026-11-01", "2026-12-01"),
    "去年5月": ("2025-05-01", "2025-06-01"),
    "2023年": ("2023-01-01", "2024-01-01"),
}

# query -> (start, end) relative to WED
WED_CASES: dict[str, tuple[str, str]] = {
    "on Wednesday": ("2026-03-11", "2026-03-12"),
    "last Wednesday": ("2026-03-04", "2026-03-05"),
    "last Tuesday": ("2026-03-10", "2026-03-11"),
    "on Friday": ("2026-03-06", "2026-03-07"),
    "this Friday": ("2026-03-13", "2026-03-14"),
    "next Wednesday": ("2026-03-18", "2026-03-19"),
    "last weekend": ("2026-03-07", "2026-03-09"),
    "in May": ("2025-05-01", "2025-06-01"),
    "in March": ("2026-03-01", "2026-04-01"),
    "last March": ("2025-03-01", "2025-04-01"),
    "next March": ("2027-03-01", "2027-04-01"),
    "last February": ("2026-02-01", "2026-03-01"),
    "May 8th": ("2025-05-08", "2025-05-09"),
    "Feb 29th": ("2024-02-29", "2024-03-01"),
    "a month ago": ("2026-02-01", "2026-03-01"),
    "4 months ago": ("2025-11-01", "2025-12-01"),
    "周三": ("2026-03-11", "2026-03-12"),
    "周五": ("2026-03-06", "2026-03-07"),
    "这周五": ("2026-03-13", "2026-03-14"),
    "上周三": ("2026-03-04", "2026-03-05"),
    "周末": ("2026-03-07", "2026-03-09"),
    "6月": ("2025-06-01", "2025-07-01"),
}


@pytest.mark.parametrize(("query", "expected"), list(SAT_CASES.items()))
def test_saturday_phrases(query: str, expected: tuple[str, str]) -> None:
    found = find_range(query, SAT)
    assert found is not None, query
    assert (found.start, found.end) == days(*expected)


@pytest.mark.parametrize(("query", "expected"), list(WED_CASES.items()))
def test_midweek_phrases(query: str, expected: tuple[str, str]) -> None:
    found = find_range(query, WED)
    assert found is not None, query
    assert (found.start, found.end) == days(*expected)


@pytest.mark.parametrize(
    ("query", "delta"),
    [
        ("in the past 3 days", timedelta(days=3)),
        ("over the last two weeks", timedelta(weeks=2)),
        ("in the last week", timedelta(weeks=1)),
        ("the past month", timedelta(days=31)),  # 21 October 15:00 .. 21 November 15:00
        ("最近三天", timedelta(days=3)),
        ("过去两周", timedelta(weeks=2)),
    ],
)
def test_rolling_windows_end_now(query: str, delta: timedelta) -> None:
    found = find_range(query, SAT)
    assert found is not None
    assert (found.start, found.end) == (SAT - delta, SAT)


def test_since_stretches_the_window_to_now() -> None:
    assert find_range("since 2023", SAT) == TimeRange(days("2023-01-01", "2024-01-01")[0], SAT, "since 2023")
    found = find_range("what changed since last week", SAT)
    assert found is not None
    assert (found.start, found.end, found.text) == (
        days("2026-11-09", "2026-11-16")[0],
        SAT,
        "since last week",
    )


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("what happened in 2023, especially last Tuesday", "last Tuesday"),
        ("yesterday or sometime last week", "yesterday"),
        ("in May 2023, maybe on May 8, 2023", "on May 8, 2023"),
        ("the day before yesterday", "the day before yesterday"),  # not the "yesterday" inside it
        ("over the last week", "over the last week"),  # the rolling phrase, not the calendar "last week"
        ("2023年5月8日", "2023年5月8日"),
        ("去年5月", "去年5月"),
        ("上周三", "上周三"),
        ("上周一起吃饭", "上周"),  # 一起 is "together", not Monday
        ("on Monday or on Friday", "on Monday"),  # a tie goes to the earlier phrase
    ],
)
def test_most_specific_phrase_wins(query: str, text: str) -> None:
    found = find_range(query, SAT)
    assert found is not None
    assert found.text == text


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what you think?",
        "we may go there",
        "this may fail",
        "2 may be enough",
        "march forward together",
        "I have 2023 photos",
        "wait a second",
        "the second option",
        "in 1850 nothing happened",
        "what is my passport number",
        "every week we meet",
        "2023-13-45",
        "周报写好了吗",
        "一周有七天",
        "我们每月开一次会",
        "",
    ],
)
def test_no_false_positives(query: str) -> None:
    assert find_range(query, SAT) is None


@pytest.mark.parametrize(
    ("query", "rest"),
    [
        ("what did we discuss last Tuesday", "what did we discuss"),
        ("what did we discuss last Tuesday?", "what did we discuss?"),
        ("Yesterday, what did Anna say", "what did Anna say"),
        ("notes from the meeting on the 8th of May about budgets", "notes from the meeting about budgets"),
        ("what happened in May 2023", "what happened"),
        ("上周三我们聊了什么", "我们聊了什么"),
        ("我们昨天聊了什么？", "我们聊了什么？"),
    ],
)
def test_strip_range(query: str, rest: str) -> None:
    found = find_range(query, SAT)
    assert found is not None
    assert strip_range(query, found) == rest


def test_strip_range_leaves_a_query_without_the_phrase_alone() -> None:
    found = TimeRange(*days("2026-11-20", "2026-11-21"), "yesterday")
    assert strip_range("what about today", found) == "what about today"


def test_contains_is_half_open_and_takes_naive_as_utc() -> None:
    found = find_range("yesterday", SAT)
    assert found is not None
    assert found.contains(datetime(2026, 11, 20, tzinfo=UTC))
    assert found.contains(datetime(2026, 11, 20, 23, 59))
    assert not found.contains(datetime(2026, 11, 21, tzinfo=UTC))


def test_other_timezones_are_converted_to_utc() -> None:
    tokyo = SAT.astimezone(timezone(timedelta(hours=9)))  # already Sunday in Tokyo, still Saturday in UTC
    found = find_range("today", tokyo)
    assert found is not None
    assert (found.start, found.end) == days("2026-11-21", "2026-11-22")
    assert day_of(tokyo) == date(2026, 11, 21)
    assert day_of(datetime(2026, 11, 21, 23, 0)) == date(2026, 11, 21)


def test_naive_now_is_a_bug() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        find_range("today", datetime(2026, 11, 21))


RELATIVE = [
    "today",
    "yesterday",
    "the day before yesterday",
    "tomorrow",
    "this week",
    "last week",
    "next week",
    "this month",
    "last month",
    "this year",
    "last year",
    "last weekend",
    "5 days ago",
    "3 weeks ago",
    "11 months ago",
    "on Tuesday",
    "last Tuesday",
    "this Tuesday",
    "next Sunday",
    "in February",
    "Feb 29th",
    "今天",
    "昨天",
    "前天",
    "本周",
    "上周",
    "上周三",
    "周日",
    "上个月",
    "去年",
    "三天前",
    "两周前",
    "十二个月前",
    "2月29日",
]

nows = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC))


@given(now=nows, phrase=st.sampled_from(RELATIVE))
def test_relative_windows_are_whole_days(now: datetime, phrase: str) -> None:
    found = find_range(phrase, now)
    assert found is not None
    assert found.start < found.end
    assert found.start.tzinfo == UTC and found.end.tzinfo == UTC
    assert found.start.time() == time() and found.end.time() == time()
    assert found.text == phrase


@given(now=nows)
def test_yesterday_is_the_day_before_today(now: datetime) -> None:
    today, yesterday = find_range("today", now), find_range("yesterday", now)
    assert today is not None and yesterday is not None
    assert today.contains(now)
    assert yesterday.end == today.start
    assert yesterday.start == today.start - timedelta(days=1)
    assert find_range("昨天", now) == TimeRange(yesterday.start, yesterday.end, "昨天")


@given(now=nows, phrase=st.sampled_from(["this week", "this month", "this year", "本周", "本月", "今年"]))
def test_current_periods_contain_now(now: datetime, phrase: str) -> None:
    found = find_range(phrase, now)
    assert found is not None
    assert found.contains(now)


@given(now=nows)
def test_last_weekday_is_strictly_before_today(now: datetime) -> None:
    found = find_range("last Tuesday", now)
    assert found is not None
    assert found.start.weekday() == 1
    assert now.date() - timedelta(days=7) <= found.start.date() < now.date()


@given(now=nows, n=st.integers(min_value=1, max_value=60))
def test_past_n_days_ends_now(now: datetime, n: int) -> None:
    found = find_range(f"in the past {n} days", now)
    assert found is not None
    assert (found.start, found.end) == (now - timedelta(days=n), now)


@given(
    query=st.text(
        alphabet=st.sampled_from(
            list(
                "0123456789 -/.,年月日号周天前上下这本个星期礼拜一二三十两ago daysweekmonthyearlastnextMay of the"
            )
        ),
        max_size=40,
    )
)
def test_never_raises_on_any_text(query: str) -> None:
    found = find_range(query, SAT)
    assert found is None or (found.start < found.end and found.text in query)


def test_a_date_without_its_year_is_marked_yearless() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert find_range("what did Diego say on 17 March", now).yearless  # type: ignore[union-attr]
    assert find_range("camping in June", now).yearless  # type: ignore[union-attr]
    assert find_range("3月5日的会", now).yearless  # type: ignore[union-attr]
    for written in ("in June 2023", "last June", "since June", "2023年3月", "last Tuesday", "in 2023"):
        assert not find_range(written, now).yearless, written  # type: ignore[union-attr]


def test_years_back_keeps_the_calendar_window() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    june = find_range("in June", now).years_back(3)  # type: ignore[union-attr]
    assert (june.start, june.end) == (datetime(2023, 6, 1, tzinfo=UTC), datetime(2023, 7, 1, tzinfo=UTC))
    leap = find_range("on 29 February 2024", now).years_back(1)  # type: ignore[union-attr]
    assert leap.start == datetime(2023, 2, 28, tzinfo=UTC)


def test_on_a_day_of_march_or_may_is_a_date() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert find_range("what did Diego say on 17 March", now).text == "on 17 March"  # type: ignore[union-attr]
    assert find_range("2 may be enough", now) is None


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the LGBTQ support group?",
        "How long has Nate had his first two turtles?",
        "For how long has Nate had his snakes?",
        "In what year did John move?",
        "Which month did they meet?",
        "After how many weeks did Tim call back?",
        "How many days passed between the concert and the trip?",
        "Which did I buy first, the bike or the car?",
        "What is the order of the three events: 'a', 'b' and 'c'?",
        "我什么时候去的北京？",
        "他多久没来了",
    ],
)
def test_a_question_asking_for_a_time(query: str) -> None:
    assert asks_time(query)


@pytest.mark.parametrize(
    "query",
    [
        "What did Melanie feel when she saw the lake?",  # "when" as a conjunction
        "Where did Joanna travel to in July 2022?",  # names a time, asks a place
        "Who supports Caroline when she has a negative experience?",
        "How many pets does Nate have?",
        "What was the last book she read?",
        "她去了哪里？",
        "",
    ],
)
def test_a_question_not_asking_for_a_time(query: str) -> None:
    assert not asks_time(query)


@given(st.text(max_size=80))
def test_asks_time_never_raises(query: str) -> None:
    assert asks_time(query) in (True, False)


def test_a_text_without_chinese_characters_skips_the_chinese_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Chinese rules are compiled on the first text with a character from U+4E00 up and run only on
    such texts: none of them can match without one, so every window is the one all rules give."""
    from vaultmem import timeparse

    for pattern, _ in timeparse._cn_compiled():
        assert all(c.isascii() or c >= "\u4e00" for c in pattern.pattern), pattern.pattern
        assert any(c >= "\u4e00" for c in pattern.pattern)
    now = datetime(2026, 5, 20, 12, tzinfo=UTC)
    queries = [
        "what did we decide 3 weeks ago",
        "in 2023",
        "12 2024 05",
        "last Tuesday in May",
        "since 2021-03-04",
        "10/12 and 3 months",
        "上周三我们说了什么",
        "2023年5月的预算",
        "去年 in May",
        "近3天",
        "",
    ]
    got = [timeparse.find_range(q, now) for q in queries if q]
    every = timeparse._EN_COMPILED + timeparse._cn_compiled()
    monkeypatch.setattr(timeparse, "_rules", lambda text: every)
    assert got == [timeparse.find_range(q, now) for q in queries if q]
    assert sum(g is not None for g in got) >= 8
