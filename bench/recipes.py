"""Recipe promotion and matching on a fixed list of task phrasings: how well does "three similar
successful requests make a recipe" find the real task types, and do held-back paraphrases find them?

    python bench/recipes.py [--thresholds 0.45,0.5,...] [--seed 7]

16 task types (below), each phrased 12 ways by hand with different verbs, word orders and concrete
values; 9 phrasings of each are recorded as episodes (every fifth a failure), 3 are held back for
matching. Add 50 one-off requests (distractors) that belong to no type, and the 194 episodes are recorded
in a shuffled (seeded) order through the public API (``Vault.record_episode``) into a fresh vault per
threshold, with the packaged all-MiniLM-L6-v2 (vectors computed once and reused across thresholds).

Reported per similarity threshold:
- **precision**: the share of recipes whose founding episodes all belong to one task type (a recipe
  with a distractor, or two types, is wrong); a second recipe for a type counts as a duplicate;
- **recall**: the share of task types that got a recipe;
- **joined**: the share of episodes that joined a recipe of their own type, of all that joined one;
- the cosine of requests within a type and across types (percentiles), once.

Then, at the chosen threshold, **matching**: ``Vault.recipes_for`` for each held-back paraphrase (the
recipe of its type first = right; another first = wrong; none = miss) and for 20 more one-off requests
(any recipe = a false match). The machine this runs on may be loaded; only ratios are reported.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import Vault
from vaultmem import recipes as recipes_module
from vaultmem.embed import Embedder, load_embedder

# (type, tools, twelve phrasings). The first nine are recorded, the last three held back for matching.
TASKS: list[tuple[str, list[str], list[str]]] = [
    (
        "book_train",
        ["search_trains", "book_ticket"],
        [
            "Book a train from Tokyo to Kyoto on 14 April",
            "Can you get me a train ticket to Hamburg for Friday morning?",
            "I need a seat on the 9am train from Lyon to Paris",
            "Reserve a train from Osaka to Nara tomorrow",
            "Please book rail tickets from Berlin to Munich next Tuesday",
            "Find and book a train to Edinburgh on the 3rd",
            "Get me on a train from Milan to Rome this weekend",
            "Book the cheapest train from Vienna to Prague on Saturday",
            "Sort out a train ticket to Cambridge for tomorrow afternoon",
            "Book me a train to Porto for Sunday",
            "Could you reserve two train tickets from Zurich to Basel?",
            "I want to take the train to Brighton on Monday, book it",
        ],
    ),
    (
        "weather",
        ["get_forecast"],
        [
            "What's the weather in Lisbon tomorrow?",
            "Will it rain in Kyoto on Saturday?",
            "Give me the forecast for Berlin this week",
            "How hot will it be in Seville today?",
            "Is it going to snow in Denver tonight?",
            "Check the weather for my trip to Oslo",
            "Do I need an umbrella in London this afternoon?",
            "Is it windy in Lisbon right now?",
            "What will the weather be like in Kyoto next Tuesday?",
            "What's the temperature going to be in Madrid on Friday?",
            "Forecast for Amsterdam tomorrow please",
            "Will it be sunny in Nice this weekend?",
        ],
    ),
    (
        "email_digest",
        ["list_unread", "summarise"],
        [
            "Summarise my unread emails from the bank",
            "Give me a digest of today's unread mail",
            "What did I miss in my inbox this morning?",
            "Go through my unread messages from Ana and summarise them",
            "Summarize the new emails about the Tidepool release",
            "Any important unread emails since yesterday?",
            "Catch me up on my inbox",
            "Read my unread emails and tell me which need an answer",
            "Summarise the emails I got overnight",
            "Summarise the unread emails in my work account",
            "Tell me what's in my unread mail from the landlord",
            "Skim my inbox and give me the highlights",
        ],
    ),
    (
        "schedule_meeting",
        ["find_slot", "create_event"],
        [
            "Set up a meeting with Diego on Thursday at 3pm",
            "Schedule a call with the design team next week",
            "Book 30 minutes with Priya tomorrow morning",
            "Find a time for a meeting with Ana and Leo on Monday",
            "Put a sync with the sales team in my calendar for Friday",
            "Arrange a one-on-one with my manager next Tuesday",
            "Can you schedule a meeting with the landlord about the lease?",
            "Find a slot to meet Priya and Leo on Thursday",
            "Schedule a team meeting for Monday at 10",
            "Set up a 1-hour meeting with Chen on Wednesday afternoon",
            "Schedule a catch-up call with Mara for next week",
            "Get a meeting on the calendar with the auditors on the 12th",
        ],
    ),
    (
        "translate",
        ["translate"],
        [
            "Translate this paragraph into German",
            "How do you say 'see you tomorrow' in Japanese?",
            "Translate the contract summary into Spanish",
            "Put this email into French for me",
            "Translate the menu from Italian to English",
            "Can you translate these instructions into Portuguese?",
            "Render this message in Chinese",
            "Translate the product description into Italian",
            "Could you turn this text into Swedish?",
            "Translate my cover letter into Dutch",
            "What's this sentence in Korean?",
            "Translate the invitation into Polish please",
        ],
    ),
    (
        "expense_report",
        ["read_receipt", "file_expense"],
        [
            "File an expense report for the taxi receipt",
            "Submit my hotel bill from Lisbon as an expense",
            "Add the client dinner to my expenses",
            "Log the train ticket receipt in the expense system",
            "Create an expense claim for the conference fee",
            "Expense the 45 euro lunch with the supplier",
            "Put the airport parking receipt on my expense report",
            "Add my parking receipt from the airport to expenses",
            "Report the team lunch receipt as an expense",
            "Claim the coworking day pass as an expense",
            "File the Uber receipts from Berlin as expenses",
            "Submit an expense for the new keyboard",
        ],
    ),
    (
        "restaurant",
        ["search_restaurants", "reserve_table"],
        [
            "Reserve a table for two at Tasca do Chico on Friday at 8pm",
            "Book dinner for four somewhere near the hotel tonight",
            "Find a sushi place in Kyoto and book a table for Saturday",
            "Get us a table at the Italian place on Sunday lunch",
            "Make a restaurant reservation for six people next Thursday",
            "Book a table for our anniversary dinner",
            "Can you reserve a vegetarian restaurant for tomorrow evening?",
            "Get a table for five at a steakhouse on Friday night",
            "Book a ramen place for lunch tomorrow",
            "Book a table for 3 at Noma on the 20th",
            "Reserve brunch for two on Saturday morning",
            "Find a tapas bar and book a table for tonight",
        ],
    ),
    (
        "review_pr",
        ["fetch_diff", "run_tests", "comment"],
        [
            "Review pull request #482 in tidepool",
            "Take a look at the open PR on the parser and leave comments",
            "Can you review Chen's pull request for the webhook fix?",
            "Check PR 17 in vaultmem and tell me if it's ready to merge",
            "Do a code review of the migration pull request",
            "Review the latest PR on the atlas repository",
            "Look over pull request 231 and comment on the tests",
            "Review the pull request that adds retries to the webhook",
            "Go over PR #55 and approve it if the tests pass",
            "Review the open pull request for the login page",
            "Give PR #90 in the docs repo a review",
            "Please review the dependency update pull request",
        ],
    ),
    (
        "reminder",
        ["create_reminder"],
        [
            "Remind me to call the dentist at 5pm",
            "Set a reminder to pay the rent on the 1st",
            "Remind me tomorrow morning to water the plants",
            "Don't let me forget to send the invoice on Friday",
            "Set a reminder for the passport renewal next month",
            "Remind me in two hours to check the oven",
            "Ping me on Monday to follow up with Diego",
            "Remind me on Sunday evening to put the bins out",
            "Set a reminder to call my mother on her birthday",
            "Remind me to buy a birthday present for Ana next week",
            "Set a reminder to renew the car insurance in March",
            "Remind me at 8 tonight to take my medicine",
        ],
    ),
    (
        "shopping_list",
        ["add_item"],
        [
            "Add oat milk to my shopping list",
            "Put eggs and bread on the grocery list",
            "We're out of coffee beans, add them to the list",
            "Add batteries to the shopping list",
            "Put two lemons and some basil on my groceries",
            "Add dish soap to the shopping list please",
            "Put tomatoes on the grocery list",
            "Add shampoo and toothpaste to the shopping list",
            "Put flour on my shopping list for the weekend baking",
            "Add rice and olive oil to my shopping list",
            "We need toilet paper, put it on the list",
            "Add dog food to the groceries",
        ],
    ),
    (
        "flight_status",
        ["flight_lookup"],
        [
            "Is flight TP1234 on time?",
            "Check the status of my flight to Lisbon",
            "Has LH401 landed yet?",
            "What gate does my flight to Boston leave from?",
            "Is the 6:40 flight to Madrid delayed?",
            "Track flight BA287 for me",
            "When does Diego's flight from Mexico City arrive?",
            "Is my flight to Paris delayed today?",
            "Check if flight KL1002 has departed",
            "Is my flight to Tokyo still on schedule?",
            "Check whether UA90 is delayed",
            "What's the arrival time of flight AF1024?",
        ],
    ),
    (
        "currency",
        ["fx_rate"],
        [
            "Convert 250 euros to US dollars",
            "How much is 10,000 yen in euros?",
            "What's 80 pounds in Swiss francs?",
            "Convert 1,500 dollars to Mexican pesos",
            "How many euros is 300 Brazilian reais?",
            "Change 45 USD into GBP",
            "What is 2000 Danish kroner in euros?",
            "Convert 120 Swiss francs to euros",
            "How much is 75 dollars in Japanese yen?",
            "Convert 99 euros to yen",
            "How much is 500 Canadian dollars in US dollars?",
            "What's 60 francs in euros today?",
        ],
    ),
    (
        "news",
        ["search_news", "summarise"],
        [
            "Give me today's headlines about climate policy",
            "What's the latest news on the chip shortage?",
            "Any news about the elections in Portugal?",
            "Summarise this morning's tech news",
            "What happened in the markets today?",
            "Catch me up on the news about the strike",
            "Find recent articles about the Tokyo housing market",
            "What are the main news stories this evening?",
            "Any news on the central bank interest rate decision?",
            "What's new in AI news this week?",
            "Give me the top headlines from Germany",
            "Any updates on the rail strike today?",
        ],
    ),
    (
        "fix_test",
        ["run_tests", "read_file", "edit_file", "run_tests"],
        [
            "Fix the failing test in tests/test_parser.py",
            "The CI is red on test_login, can you fix it?",
            "Make the flaky test in the watcher suite pass",
            "Debug why test_compact fails and fix it",
            "Fix the broken unit test for the date parser",
            "test_embed is failing after the upgrade, please fix",
            "Get the integration tests passing again",
            "Fix the test that fails on Windows paths",
            "The snapshot test in the UI package is failing, fix it",
            "Fix the assertion error in test_search",
            "Repair the failing test in the billing module",
            "One test in test_api.py fails on Python 3.12, fix it",
        ],
    ),
    (
        "play_music",
        ["search_music", "play"],
        [
            "Play some jazz",
            "Put on relaxing piano music",
            "Play the new album by Rosalia",
            "I want to hear some 80s rock",
            "Play lo-fi beats for studying",
            "Start my running playlist",
            "Play something by Miles Davis",
            "Play some reggae on the living room speaker",
            "Put on an upbeat workout playlist",
            "Put on some classical music for dinner",
            "Play bossa nova in the kitchen",
            "Play my liked songs on shuffle",
        ],
    ),
    (
        "log_workout",
        ["log_activity"],
        [
            "Log my workout: 5 km run in 27 minutes",
            "Record a 45 minute yoga session for today",
            "I did 3 sets of 10 squats, log it",
            "Add a 20 km bike ride to my fitness log",
            "Log today's swim: 1500 meters",
            "Track my gym session: bench press and rows",
            "Record a 10,000 step walk for yesterday",
            "Log a 12 km trail run for this morning",
            "Record 40 push-ups and 60 sit-ups in my workout log",
            "Log an hour of climbing at the gym",
            "Add my morning run to the workout log",
            "Save today's workout: 30 minutes of rowing",
        ],
    ),
]
DISTRACTORS = [
    "What's the capital of Mongolia?",
    "Write a haiku about autumn leaves",
    "Explain how a heat pump works",
    "Who wrote One Hundred Years of Solitude?",
    "Draft a birthday message for my aunt",
    "How many grams of protein are in an egg?",
    "Suggest a name for my new cat",
    "What's the difference between TCP and UDP?",
    "Give me a recipe for banana bread",
    "How long should I boil an egg for a soft yolk?",
    "Recommend a good book about history",
    "Explain the offside rule in football",
    "What year did the Berlin Wall fall?",
    "Help me plan a vegetable garden",
    "Write a limerick about a programmer",
    "What is a Roth IRA?",
    "How do I remove a red wine stain?",
    "Tell me a fun fact about octopuses",
    "Summarise the plot of Hamlet",
    "What are the symptoms of dehydration?",
    "How do I reset my router?",
    "Outline a 10 minute talk about open source",
    "Compare the iPhone and Pixel cameras",
    "What's a good stretching routine for the back?",
    "Why is the sky blue?",
    "Explain compound interest simply",
    "Give me ideas for a rainy Sunday",
    "What's the best way to learn chess openings?",
    "How do vaccines work?",
    "Describe the water cycle",
    "What's a good gift for a five-year-old?",
    "Explain the rules of cricket",
    "How do I descale a kettle?",
    "Write a short bio for my LinkedIn profile",
    "What's the population of Canada?",
    "Give me a pun about cheese",
    "How do I change a bike tyre?",
    "Explain what inflation is",
    "What should I pack for a week in Iceland?",
    "List some icebreaker questions for a workshop",
    "How does a mortgage offset account work?",
    "Who painted the Girl with a Pearl Earring?",
    "Suggest a name for a bakery",
    "How much water should a cactus get?",
    "Explain the difference between baking soda and baking powder",
    "What's a polite way to decline an invitation?",
    "Write a toast for my sister's wedding",
    "How do I keep basil alive indoors?",
    "What's the plot of Spirited Away?",
    "How do I calm down before an interview?",
]
OTHER_QUERIES = [  # for false matches: one-off requests never recorded
    "Write a poem about the sea",
    "What's the tallest mountain in Africa?",
    "Explain quantum entanglement",
    "Give me a pep talk before my exam",
    "How do I fold a fitted sheet?",
    "What does a product manager do?",
    "Suggest a weekend project with an Arduino",
    "What's the history of the bicycle?",
    "How do I make cold brew coffee?",
    "Recommend a podcast about economics",
    "How do solar panels work?",
    "What's the meaning of the word ubiquitous?",
    "Help me write a thank-you note to a teacher",
    "What are good houseplants for low light?",
    "How do I negotiate a salary?",
    "Tell me about the Roman Empire",
    "What is the Pythagorean theorem?",
    "Give me tips for public speaking",
    "How do I start journaling?",
    "What causes the northern lights?",
]
NEAR_MISSES = [  # one-off requests that share a word with a task type but ask something else
    "What's the history of the train in Japan?",
    "How do airplanes stay in the air during a flight?",
    "Why do some emails end up in spam?",
    "Explain how translation software works",
    "What's the etiquette for tipping at a restaurant in Japan?",
    "How do I write a good pull request description?",
    "Is it healthy to work out every day?",
    "Who invented the shopping cart?",
    "How does the weather affect my mood?",
    "What makes a good meeting agenda?",
    "Why do currencies lose value?",
    "How do news agencies verify sources?",
    "What music helps with concentration?",
    "How do I write a good test?",
    "What is an expense ratio in an index fund?",
    "Why do people forget things they meant to remember?",
    "How long does a train ticket refund take in general?",
    "What's the best way to read more books?",
    "How are playlists recommended by streaming apps?",
    "What is a reservation price in economics?",
]
RECORDED = 9


class CachingEmbedder:
    """The real model, each text embedded once across the runs."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.cache: dict[str, np.ndarray] = {}
        self.model_id, self.dim = inner.model_id, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            for text, vec in zip(todo, self.inner.embed(todo), strict=True):
                self.cache[text] = vec
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def episodes(seed: int) -> list[tuple[str, str | None, list[dict[str, Any]], bool]]:
    """(request, task type or None, tool calls, success) in a shuffled, seeded order."""
    rng = random.Random(seed)
    out: list[tuple[str, str | None, list[dict[str, Any]], bool]] = []
    for kind, tools, phrasings in TASKS:
        for n, request in enumerate(phrasings[:RECORDED]):
            calls = [{"name": tool, "args": {"request_no": n, "mode": "default"}} for tool in tools]
            out.append((request, kind, calls, n % 5 != 4))  # every fifth fails
    out += [(request, None, [{"name": "answer", "args": {}}], True) for request in DISTRACTORS]
    rng.shuffle(out)
    return out


def cosines(embedder: CachingEmbedder) -> list[list[object]]:
    requests = [(kind, r) for kind, _, ps in TASKS for r in ps[:RECORDED]]
    vecs = embedder.embed([r for _, r in requests])
    sims = vecs @ vecs.T
    within: list[float] = []
    across: list[float] = []
    for i in range(len(requests)):
        for j in range(i + 1, len(requests)):
            (within if requests[i][0] == requests[j][0] else across).append(float(sims[i, j]))
    dvecs = embedder.embed(DISTRACTORS)
    distract = [float(x) for x in (dvecs @ vecs.T).ravel()]
    rows = []
    for name, values in (
        ("same task type", within),
        ("different types", across),
        ("distractor vs task", distract),
    ):
        p = np.percentile(values, [5, 50, 95])
        rows.append([name, len(values), f"{p[0]:.3f}", f"{p[1]:.3f}", f"{p[2]:.3f}"])
    return rows


def run(threshold: float, embedder: CachingEmbedder, seed: int, keep: bool = False) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    vault = Vault.init(Path(tmp.name) / "v", f"[recipes]\nsimilarity = {threshold}\n", embedder=embedder)
    kind_of: dict[str, str | None] = {}
    joined_right = joined = 0
    times = []
    for request, kind, calls, ok in episodes(seed):
        start = time.perf_counter()
        record = vault.record_episode(
            request, mode="agent", tools=calls, outcomes=["ok"] * len(calls), success=ok
        )
        times.append(time.perf_counter() - start)
        kind_of[record.episode.id] = kind
        if record.outcome == "joined" and record.recipe is not None:
            joined += 1
            founders = {kind_of.get(e) for e in record.recipe.episodes[:3]}
            joined_right += int(founders == {kind})
    learned = [r for r in vault.recipes(archived=True) if r.learned]
    pure: dict[str, int] = {}
    wrong = 0
    for recipe in learned:
        founders = {kind_of.get(e) for e in recipe.episodes[:3]}
        if len(founders) == 1 and None not in founders:
            k = next(iter(founders))
            assert k is not None
            pure[k] = pure.get(k, 0) + 1
        else:
            wrong += 1
    duplicates = sum(n - 1 for n in pure.values())
    result = {
        "threshold": threshold,
        "recipes": len(learned),
        "precision": (len(learned) - wrong) / len(learned) if learned else 0.0,
        "recall": len(pure) / len(TASKS),
        "duplicates": duplicates,
        "joined": joined,
        "joined_right": joined_right / joined if joined else 0.0,
        "p50_ms": statistics.median(times) * 1000,
        "vault": vault,
        "tmp": tmp,
        # Only a pure recipe stands for a type: a query answered by a mixed one counts as wrong.
        "kind_by_recipe": {
            r.name: kinds.pop()
            for r in learned
            if len(kinds := {kind_of.get(e) for e in r.episodes[:3]}) == 1
        },
    }
    if not keep:
        vault.close()
        tmp.cleanup()
    return result


def matching(result: dict[str, Any], show: bool = False) -> list[list[object]]:
    vault: Vault = result["vault"]
    kind_by_recipe = result["kind_by_recipe"]
    promoted = {k for k in kind_by_recipe.values() if k}
    right = wrong = miss = 0
    right_any = 0
    by_trigger = 0
    for kind, _, phrasings in TASKS:
        if kind not in promoted:
            continue
        for request in phrasings[RECORDED:]:
            found = vault.recipes_for(request)
            if not found.hits:
                miss += 1
                if show:
                    print(f"  miss  {kind:16} {request}")
                continue
            first = kind_by_recipe.get(found.hits[0].recipe.name)
            if show and first != kind:
                print(f"  wrong {kind:16} {request} -> {found.hits[0].recipe.name}")
            right += int(first == kind)
            wrong += int(first != kind)
            right_any += int(any(kind_by_recipe.get(h.recipe.name) == kind for h in found.hits))
            by_trigger += int(found.hits[0].matched_by == "trigger")
    asked = right + wrong + miss
    false = sum(1 for q in OTHER_QUERIES if vault.recipes_for(q).hits)
    near = sum(1 for q in NEAR_MISSES if vault.recipes_for(q).hits)
    caps = max(len(vault.recipes_for(q).hits) for _, _, ps in TASKS for q in ps)
    chars = max(vault.recipes_for(q).chars for _, _, ps in TASKS for q in ps)
    return [
        ["held-back paraphrases of promoted types", asked],
        ["right recipe first (top-1 accuracy)", f"{right / asked:.3f}" if asked else "-"],
        ["right recipe among those returned", f"{right_any / asked:.3f}" if asked else "-"],
        ["wrong recipe first", f"{wrong / asked:.3f}" if asked else "-"],
        ["no recipe", f"{miss / asked:.3f}" if asked else "-"],
        ["first hit by trigger (else by word overlap)", f"{by_trigger / max(1, right + wrong):.3f}"],
        ["one-off requests given a recipe (false match)", f"{false}/{len(OTHER_QUERIES)}"],
        ["near misses (a task's word, another question) given one", f"{near}/{len(NEAR_MISSES)}"],
        ["most recipes / characters returned for one request", f"{caps} / {chars}"],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--thresholds", default="0.25,0.28,0.3,0.32,0.34,0.36,0.4,0.45,0.5,0.6")
    parser.add_argument("--choose", type=float, default=None, help="threshold for the matching table")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--show", action="store_true", help="print the recipes and every miss")
    parser.add_argument(
        "--trigger-min", default="", help="also compare these trigger score floors (e.g. 0.15,0.25,0.5)"
    )
    args = parser.parse_args()
    embedder = CachingEmbedder(load_embedder())
    total = sum(RECORDED for _ in TASKS) + len(DISTRACTORS)
    print(f"{total} episodes: {len(TASKS)} task types x {RECORDED} phrasings (every fifth failed), "
          f"{len(DISTRACTORS)} one-off requests; model {embedder.model_id}\n")  # fmt: skip
    print("Cosine of two requests (all-MiniLM-L6-v2):\n")
    print(table(["pair", "n", "p5", "p50", "p95"], cosines(embedder)))
    rows = []
    best: tuple[float, float] | None = None
    for threshold in (float(t) for t in args.thresholds.split(",")):
        r = run(threshold, embedder, args.seed)
        f1 = 2 * r["precision"] * r["recall"] / (r["precision"] + r["recall"]) if r["recipes"] else 0.0
        rows.append([
            f"{threshold:.2f}", r["recipes"], f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{f1:.3f}",
            r["duplicates"], f"{r['joined_right']:.3f} of {r['joined']}", f"{r['p50_ms']:.0f}",
        ])  # fmt: skip
        if best is None or f1 > best[1]:
            best = (threshold, f1)
    print("\nPromotion by similarity threshold:\n")
    print(table(
        ["threshold", "recipes", "precision", "recall", "F1", "duplicates", "joined own type", "record p50 ms"],
        rows,
    ))  # fmt: skip
    chosen = args.choose if args.choose is not None else (best[0] if best else 0.7)
    result = run(chosen, embedder, args.seed, keep=True)
    print(f"\nMatching held-back paraphrases with recipes_for, threshold {chosen:.2f}:\n")
    if args.show:
        for recipe in result["vault"].recipes(archived=True):
            kind = result["kind_by_recipe"].get(recipe.name)
            print(f"  recipe {recipe.name:32} {kind!s:16} trigger {list(recipe.trigger)}")
            founders = [e for e in result["vault"].episodes() if e.id in recipe.episodes[:3]]
            print("      founded by: " + " | ".join(e.request for e in founders))
    print(table(["", "value"], matching(result, args.show)))
    floors = [float(x) for x in args.trigger_min.split(",") if x]
    if floors:
        shipped = recipes_module.TRIGGER_MIN
        vault = result["vault"]
        config = vault.config
        rows = []
        for floor in floors:
            vault.config = replace(config, recipes_trigger_min=floor)
            table_rows = dict((str(k), v) for k, v in matching(result))
            rows.append([
                f"{floor:.2f}" + (" (shipped)" if floor == shipped else ""),
                table_rows["right recipe first (top-1 accuracy)"],
                table_rows["wrong recipe first"],
                table_rows["no recipe"],
                table_rows["one-off requests given a recipe (false match)"],
                table_rows["near misses (a task's word, another question) given one"],
            ])  # fmt: skip
        vault.config = config
        print("\nTrigger score floor (a trigger matches at or above it; else word overlap):\n")
        print(table(["floor", "top-1", "wrong first", "none", "one-off matched", "near miss matched"], rows))
    result["vault"].close()
    result["tmp"].cleanup()


if __name__ == "__main__":
    main()
