"""The fast score: every rule fires on English and Chinese examples and stays quiet on near misses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vaultmem.errors import InvalidInput
from vaultmem.scoring import DEFAULT_THRESHOLD, RULES, FastScorer, Score

# rule -> (texts it must fire on, near misses it must not fire on)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "remember": (
        [
            "Remember this: my passport number ends in 42.",
            "Please remember that Anna is allergic to nuts.",
            "Don't forget to water the plants on Friday.",
            "Note that the office moves to the third floor.",
            "Keep in mind that the last train leaves early.",
            "记住，我对花生过敏。",
            "别忘了周五给植物浇水。",
            "请记下这个新的地址。",
            "記住我的生日是在春天。",
        ],
        [
            "I remember the trip we took as kids.",
            "I can't remember where I parked the car.",
            "We forgot about it entirely after a while.",
            "Notes from the meeting are attached below.",
            "我记得小时候住在河边。",
        ],
    ),
    "preference": (
        [
            "I prefer tea over coffee in the morning.",
            "I really don't like loud restaurants at all.",
            "My favourite band is playing in town.",
            "I hate waiting in long queues at the bank.",
            "我喜欢安静的咖啡馆。",
            "我不喜欢吃辣的东西。",
            "我其实很讨厌下雨天出门。",
            "这是我最爱的一首歌。",
        ],
        [
            "It looks like rain later in the afternoon.",
            "She likes the blue one better than the red.",
            "Like I said, the meeting moved upstairs.",
            "他喜欢打篮球和游泳。",
        ],
    ),
    "money": (
        [
            "The ticket was $12 at the door.",
            "We paid 12 USD for the shipping.",
            "The hotel costs €85 a night in summer.",
            "Lunch was ¥100 for the two of us.",
            "They quoted the whole price in RMB.",
            "这件衣服100元，挺便宜的。",
            "首付大概3万元左右。",
            "花了五十块钱买的。",
        ],
        [
            "We had 12 people at the dinner table.",
            "Check your $HOME directory for the file.",
            "我们一块去吃饭吧，好吗？",
            "这栋楼一共有3个单元。",
        ],
    ),
    "importance": (
        [
            "This is really important for the launch.",
            "Urgent: the main server is down again.",
            "The deadline for the report is Friday.",
            "You must bring your passport to the airport.",
            "这件事非常重要，请尽快处理。",
            "紧急通知：明天全楼停电。",
            "务必在周五前提交材料。",
            "报名截止到下个月底。",
        ],
        [
            "It is not important, so just skip it.",
            "Mustard goes well with grilled sausages.",
            "The weather was pleasant on the walk home.",
            "这个不重要，随便吧。",
            "这个没那么重要，别担心。",
        ],
    ),
    "need_feeling": (
        [
            "I need a new laptop for work.",
            "I'm worried about the exam results.",
            "We are so excited about the trip to the coast.",
            "I feel a bit sad about the news today.",
            "我需要一台新电脑。",
            "我有点担心明天的考试。",
            "我觉得这个方案不错。",
            "我今天很开心。",
        ],
        [
            "The need for speed is overrated on these roads.",
            "They want to leave early tomorrow morning.",
            "Do you feel tired after the long drive?",
            "他需要好好休息一下。",
        ],
    ),
    "error": (
        [
            "The build failed on CI again.",
            "I found a bug in the date parser.",
            "It raised a ValueError on empty input.",
            "The app crashed twice this morning.",
            "Here is the full traceback from the logs.",
            "程序运行时报错了。",
            "这里有个错误需要改一下。",
            "应用一打开就崩溃。",
            "上传失败，请稍后重试。",
        ],
        [
            "The terror of that night stayed with him.",
            "A ladybug landed on my sleeve in the garden.",
            "他错过了最后一班车。",
            "这家餐厅的菜还不错。",
        ],
    ),
    "version": (
        [
            "We shipped v1.2.3 to customers yesterday.",
            "Please upgrade to Python 3.11 first.",
            "Version 2 fixes the login problem.",
            "It requires node 18 or anything newer.",
            "这个功能只在新版本里才有。",
            "升级到3.0版之后就好了。",
        ],
        [
            "It took 3.5 hours to get there by car.",
            "The coffee was $3.50 at the corner shop.",
            "Sales grew 2.5% over the whole year.",
            "Version control is a very good habit.",
            "这家出版社今年出了很多书。",
        ],
    ),
    "project": (
        [
            "I pushed the fix to simonw/llm last night.",
            "VaultMem stores memories as Markdown files.",
            "We should call it project Falcon internally.",
            "Clone github.com/encode/httpx before you start.",
            "这个项目下周正式上线。",
            "代码都在公司的仓库里。",
        ],
        [
            "Bring snacks and/or drinks to the picnic.",
            "The speed limit is 50 km/h on this road.",
            "The project is running a little late.",
            "他是一名很有经验的工程师。",
        ],
    ),
    "config": (
        [
            "Update the config before deploying it.",
            "Set DEBUG=1 in your shell first.",
            "Run it with --verbose to see more output.",
            "The server listens on port 8080 now.",
            "Put the key in an environment variable.",
            "Open localhost:5173 in the browser.",
            "把配置文件发给我看看。",
            "在设置里打开通知提醒。",
            "端口改成8080就行了。",
        ],
        [
            "The sun was setting over the hills.",
            "They raised a flag on the old pole.",
            "He arrived at the port of Shanghai at dawn.",
            "我们设计了一个新的图标。",
        ],
    ),
    "first_mention": (
        [
            "I had lunch with Alice near the office.",
            "We now use Kubernetes for everything.",
            'The book "Dune" is on my nightstand.',
            "我最近在读《三体》这本书。",
            "他们公司叫「星辰科技」。",
        ],
        [
            "The weather is nice and the sky is clear.",
            "Yesterday we walked to the park together.",
            "I think I'll stay home tonight and rest.",
            "我们今天去公园散步了。",
        ],
    ),
    "completion": (
        [
            "Finally fixed the flaky test in the suite.",
            "The feature shipped to production today.",
            "The PR got merged, thanks everyone!",
            "The database migration is done.",
            "任务已经全部完成了。",
            "终于搞定了这个问题。",
            "那个问题解决了。",
            "新版本部署成功。",
        ],
        [
            "The report is not done yet, sorry.",
            "We need to finish the slides by Monday.",
            "It will be fixed in the next release.",
            "还没完成，请再等等。",
            "这次没有成功，明天再试。",
        ],
    ),
    "credential": (
        [
            "I reset my password this morning.",
            "The API key is stored in the team vault.",
            "Send me your login details by mail.",
            "Use the token from the admin dashboard.",
            "The value was [REDACTED:password] in the old log.",
            "我的账号被锁了，怎么办？",
            "把密码改一下吧。",
            "验证码发到你手机上了。",
        ],
        [
            "The keyboard is missing a key on the left.",
            "We walked to the passport office in town.",
            "The keynote slides are ready for review.",
            "我们去公园散步吧，天气很好。",
        ],
    ),
    "datetime": (
        [
            "The meeting is on 2023-05-08 as planned.",
            "Let's meet on May 8 at the cafe.",
            "She was born on 8 May 2023 in Lyon.",
            "See you next Tuesday at the gym.",
            "I'll call you tomorrow about it.",
            "The call starts at 3pm sharp.",
            "Dinner is at 14:30 in the hall.",
            "明天下午开会讨论。",
            "我们下周二见吧。",
            "5月8日是她的生日。",
            "下午3点在门口集合。",
        ],
        [
            "You may go whenever you like to.",
            "The score was 3:1 in our favour.",
            "The second chapter was very long.",
            "我有一点累，想休息。",
            "我们周围都是高高的山。",
        ],
    ),
}

FILLER = [
    "ok",
    "OK!",
    "thanks",
    "Thanks a lot",
    "lol",
    "sure 👍",
    "好的",
    "哈哈",
    "嗯嗯",
    "收到",
    "好的，谢谢",
]
PROSE = [
    "We walked along the river and talked about the old house for hours.",
    "The garden looked different after the rain, greener and quieter than before.",
    "我们沿着河边散步，聊了好几个小时老房子的事。",
    "雨后的花园看起来不一样了，更绿也更安静。",
]


def _cases(positive: bool) -> list[tuple[str, str]]:
    return [(rule, text) for rule, (pos, neg) in CASES.items() for text in (pos if positive else neg)]


def test_every_rule_has_cases_in_both_languages() -> None:
    assert set(CASES) == set(RULES) - {"short"}
    for rule, (pos, neg) in CASES.items():
        assert any(text.isascii() for text in pos), rule
        assert any(not text.isascii() for text in pos), rule
        assert neg, rule


@pytest.mark.parametrize(("rule", "text"), _cases(positive=True))
def test_rule_fires(rule: str, text: str) -> None:
    assert rule in FastScorer().score(text).reasons


@pytest.mark.parametrize(("rule", "text"), _cases(positive=False))
def test_rule_does_not_fire_on_near_miss(rule: str, text: str) -> None:
    assert rule not in FastScorer().score(text).reasons


@pytest.mark.parametrize("text", FILLER)
def test_short_filler_is_dropped(text: str) -> None:
    scorer = FastScorer()
    score = scorer.score(text)
    assert "short" in score.reasons
    assert not scorer.admits(score)


@pytest.mark.parametrize("text", PROSE)
def test_plain_prose_is_admitted(text: str) -> None:
    scorer = FastScorer()
    score = scorer.score(text)
    assert score.reasons == ()
    assert scorer.admits(score)


def test_markers_raise_the_score() -> None:
    plain = FastScorer().score("We talked about the house and the garden for a while.")
    marked = FastScorer().score("Remember: we must sell the house before 2024-06-01, it is important.")
    assert marked.value > plain.value


def test_first_mention_fires_once_per_term() -> None:
    scorer = FastScorer()
    assert "first_mention" in scorer.score("I had lunch with Alice near the office.").reasons
    assert "first_mention" not in scorer.score("Later I called Alice about the trip.").reasons
    assert "first_mention" in scorer.score("Later I called Bob about the trip.").reasons
    assert "first_mention" in scorer.score("我最近在读《三体》这本书。").reasons
    assert "first_mention" not in scorer.score("我又看了一遍《三体》的结尾。").reasons
    assert {"alice", "bob", "三体"} <= scorer.seen_terms


def test_seen_terms_are_shared_and_capped() -> None:
    seen = {"alice"}
    scorer = FastScorer(seen_terms=seen, max_terms=3)
    assert "first_mention" not in scorer.score("I had lunch with Alice near the office.").reasons
    for name in ["Bob", "Carol", "Dave", "Erin", "Frank"]:
        assert "first_mention" in scorer.score(f"Then I talked to {name} about the plan.").reasons
        assert len(seen) <= 3
    assert "frank" in seen  # the newest term is never the one evicted


def test_deterministic_across_scorers() -> None:
    texts = [text for pos, neg in CASES.values() for text in pos + neg] + FILLER + PROSE
    first, second = FastScorer(), FastScorer()
    assert [first.score(t) for t in texts] == [second.score(t) for t in texts]


def test_reasons_follow_rules_order() -> None:
    text = (
        "Remember: I prefer the VaultMem project config, the deadline is tomorrow at 3pm, "
        "it costs $20, v1.2.3 crashed but I fixed it and I'm worried about the password."
    )
    score = FastScorer().score(text)
    assert score.reasons == (
        "remember",
        "preference",
        "money",
        "importance",
        "need_feeling",
        "error",
        "version",
        "project",
        "config",
        "first_mention",
        "completion",
        "credential",
        "datetime",
    )
    assert score.value == 1.0


def test_value_is_rounded_and_clamped() -> None:
    for text in [*FILLER, *PROSE, "Remember, it is urgent, important, a must: I need my password!"]:
        value = FastScorer().score(text).value
        assert 0.0 <= value <= 1.0
        assert round(value, 3) == value


def test_admits_at_threshold() -> None:
    scorer = FastScorer(threshold=0.5)
    assert scorer.admits(Score(0.5, ()))
    assert not scorer.admits(Score(0.499, ()))
    assert FastScorer().threshold == DEFAULT_THRESHOLD


@pytest.mark.parametrize("threshold", [-0.1, 1.5, float("nan")])
def test_bad_threshold_is_refused(threshold: float) -> None:
    with pytest.raises(InvalidInput, match="between 0 and 1"):
        FastScorer(threshold=threshold)


def test_rules_are_documented() -> None:
    assert list(RULES)[-1] == "short"
    for name, rule in RULES.items():
        assert name.isidentifier() and name == name.lower()
        assert -1.0 <= rule.weight <= 1.0 and rule.weight != 0
        assert rule.description and "\n" not in rule.description
    assert RULES["short"].weight < 0


@given(st.text())
def test_score_never_raises_and_stays_in_range(text: str) -> None:
    score = FastScorer().score(text)
    assert 0.0 <= score.value <= 1.0
    assert set(score.reasons) <= set(RULES)


FRAGMENTS = [
    "Remember",
    " I prefer ",
    "$",
    "12",
    "元",
    "万",
    "v1.",
    "3.11",
    "重要",
    "不",
    "没",
    "Alice",
    "《",
    "》",
    "「",
    "」",
    '"',
    "/",
    "--",
    "=",
    ":",
    "Error",
    "完成",
    "[REDACTED:",
    "下周",
    "5月",
    "点",
    " ",
    "\n",
    ".",
    "é",
    "İ",
    "’",
]


@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=30).map("".join))
def test_score_never_raises_on_marker_soup(text: str) -> None:
    score = FastScorer().score(text)
    assert 0.0 <= score.value <= 1.0


def test_config_default_threshold_is_the_scorer_default() -> None:
    from vaultmem.config import Config
    from vaultmem.scoring import DEFAULT_THRESHOLD

    assert Config().score_threshold == DEFAULT_THRESHOLD


def test_only_the_probes_whose_gates_pass_are_tried_and_the_same_rules_fire() -> None:
    """``score`` looks up the probes a text's gates let through (``scoring._GATED``); the rules that fire
    are those of testing every probe's gates one by one, on texts that open every word gate."""
    from vaultmem import scoring

    def every_probe(text: str) -> set[str]:
        low = text.lower().replace("’", "'")
        words = set(scoring._WORD_RE.findall(low))
        cjk, digits = bool(scoring._CJK_RE.findall(text)), scoring._DIGIT_RE.search(text) is not None
        fired = set()
        for name, probes in scoring._PROBES.items():
            for p in probes:
                if (
                    (p.cjk and not cjk)
                    or (p.digits and not digits)
                    or (p.words and p.words.isdisjoint(words))
                ):
                    continue
                target = low if p.lowered else text
                if p.marks and not any(mark in target for mark in p.marks):
                    continue
                if p.find is None or p.find(target):
                    fired.add(name)
                    break
        return fired

    gate_words = sorted({w for _, p in scoring._FLAT for w in p.words})
    texts = [f"Remind me: the {w} thing on May 8 at 3pm, 2023-05-08, or 明天下午三点" for w in gate_words]
    texts += [f"we talked about {w} again" for w in gate_words]
    texts += ["ok", "好的", "I decided to use Postgres.", "password is [redacted:secret]", "3 days ago", ""]
    rules = [name for name in scoring.RULES if name not in ("first_mention", "short")]
    for text in texts:
        reasons = set(FastScorer(seen_terms=set()).score(text).reasons)
        assert {r for r in reasons if r in rules} == every_probe(text), text
