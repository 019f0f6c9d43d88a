"""Email threads: which conversation (``session``) each email belongs to.

The session of an email thread is the Message-ID of its root. An email names its thread in its
headers: ``References`` lists the ancestors root first, ``In-Reply-To`` the parent. When both are
missing (a client or a list gateway dropped them), a reply is recognised by its subject: ``Re:``,
``AW:``, ``回复:``... and list tags stripped, the same words as an earlier thread's subject.

The rule, which gives an email the same session whichever run ingests it, as long as its thread's
earlier messages were ingested before it or with it:

1. With ``References`` or ``In-Reply-To``: the session of the first of its ancestors (root first) that
   is already known (in this batch or in the vault); if none is, the root named by ``References``
   (else the parent named by ``In-Reply-To``). So a thread whose root never arrives still shares one
   session: the root's id, which every reply's ``References`` names.
2. Without them, a subject with a reply or forward prefix joins the known thread of the same normalised
   subject and source whose message is nearest in time, within ``SUBJECT_WINDOW``.
3. Anything else starts a thread: its own Message-ID.

A batch is threaded in time order, so a reply finds its parent in the same mbox or folder of ``.eml``
files; a reply that arrives before anything of its thread starts a thread of its own, and is not moved
when its parent arrives later. Pure: what the vault already holds is given by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from vaultmem.model import InputKind, Message

# A reply with no thread headers joins a thread of the same subject only this close in time.
SUBJECT_WINDOW = timedelta(days=30)

_FOLLOW_UP = (
    r"re|aw|sv|vs|antw|odp|ynt|fwd?|wg|tr|rv|enc|回复|回覆|答复|答覆|转发|轉寄|轉發"  # reply and forward
)
_PREFIX_RE = re.compile(
    rf"^\s*(?:({_FOLLOW_UP})\s*(?:\[\d+\]|\(\d+\))?\s*[:：]|\[[^\[\]]{{1,60}}\])\s*", re.I
)
_FWD_SUFFIX_RE = re.compile(r"\s*\((?:fwd|fw)\)\s*$", re.I)


@dataclass(frozen=True)
class KnownEmail:
    """An email the vault already holds: its Message-ID, session, subject and time."""

    message_id: str
    session: str
    subject: str
    ts: datetime | None


def normalise_subject(subject: str) -> str:
    """The subject a thread shares: reply and forward prefixes and ``[list]`` tags stripped (repeatedly,
    in any order), spaces collapsed, case folded. ``"[dev] Re: AW: Kickoff  plan"`` -> ``"kickoff plan"``."""
    text = subject
    while True:
        stripped = _PREFIX_RE.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = _FWD_SUFFIX_RE.sub("", text)
    return " ".join(text.split()).casefold()


def is_follow_up(subject: str) -> bool:
    """True when the subject carries a reply or forward prefix (after any ``[list]`` tags)."""
    text = subject
    while match := _PREFIX_RE.match(text):
        if match.group(1):
            return True
        text = text[match.end() :]
    return False


def thread_messages(
    messages: Sequence[Message], known: Callable[[str], Iterable[KnownEmail]]
) -> list[Message]:
    """The messages with each email's ``session`` set by the rule above; other messages unchanged.

    ``known(source)`` returns the emails the vault already holds for a source (called at most once per
    source, and only for a source whose emails refer to other emails)."""
    order = sorted(
        (i for i, m in enumerate(messages) if m.kind is InputKind.EMAIL),
        key=lambda i: (messages[i].ts is None, messages[i].ts or datetime.min, i),
    )
    threads: dict[str, _Threads] = {}
    out = list(messages)
    for i in order:
        message = out[i]
        state = threads.get(message.source)
        if state is None:
            state = threads[message.source] = _Threads()
        ancestors = _ancestors(message)
        subject = message.meta.get("subject", "")
        if (ancestors or is_follow_up(subject)) and not state.loaded:
            state.load(known(message.source))
        session = state.session_of(message, ancestors, subject)
        state.add(message.source_id, session, subject, message.ts)
        if session != message.session:
            out[i] = replace(message, session=session)
    return out


def _ancestors(message: Message) -> list[str]:
    ids = message.meta.get("references", "").split()
    parent = message.meta.get("in_reply_to", "")
    if parent and parent not in ids:
        ids.append(parent)
    return [i for i in ids if i != message.source_id]


class _Threads:
    """The threads of one source seen so far: by message id, and by normalised subject."""

    def __init__(self) -> None:
        self.loaded = False
        self.by_id: dict[str, str] = {}
        self.by_subject: dict[str, list[tuple[datetime | None, str]]] = {}

    def load(self, known: Iterable[KnownEmail]) -> None:
        self.loaded = True
        for email in sorted(known, key=lambda e: (e.ts is None, e.ts or datetime.min)):
            self.add(email.message_id, email.session, email.subject, email.ts)

    def add(self, message_id: str | None, session: str | None, subject: str, ts: datetime | None) -> None:
        if not session:
            return
        if message_id:
            self.by_id.setdefault(message_id, session)
        key = normalise_subject(subject)
        if key and key != "(no subject)":
            self.by_subject.setdefault(key, []).append((ts, session))

    def session_of(self, message: Message, ancestors: list[str], subject: str) -> str | None:
        if ancestors:
            return next((self.by_id[a] for a in ancestors if a in self.by_id), ancestors[0])
        if is_follow_up(subject) and message.session in (None, message.source_id):  # not one given
            found = self._nearest(normalise_subject(subject), message.ts)
            if found:
                return found
        return message.session

    def _nearest(self, key: str, ts: datetime | None) -> str | None:
        candidates = self.by_subject.get(key, [])
        if not candidates:
            return None
        if ts is None:
            return candidates[-1][1]
        timed = [(abs(ts - when), n, session) for n, (when, session) in enumerate(candidates) if when]
        close = [c for c in timed if c[0] <= SUBJECT_WINDOW]
        if close:
            return min(close, key=lambda c: (c[0], -c[1]))[2]
        untimed = [session for when, session in candidates if when is None]
        return untimed[-1] if untimed else None
