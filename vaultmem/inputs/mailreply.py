"""What the sender of an email wrote: quoted text, attributions, signatures and quoted originals out.

Only ``>`` quotes and what follows the sender's text (a signature, an Outlook original, a list
footer) are removed; every line the sender wrote between quotes is kept (see ``trim_reply``). Pure
text in, text out.
"""

from __future__ import annotations

import re

from vaultmem.inputs.chat import clean_text

# What a removed quote block leaves behind when the sender's own text follows it (an inline reply).
QUOTE_MARKER = "> …"
_SENT_FROM_RE = re.compile(r"^\s*(Sent from my [\w ]{1,30}|Get Outlook for \w+|发自我的\s*\w+)\s*$", re.I)
# Lines after which nothing is the sender's: a signature, a forwarded-style original under a reply.
_SIGNATURE_RE = re.compile(r"^--\s*$")
_ORIGINAL_RE = re.compile(
    r"^\s*-{2,}\s*(Original Message|Ursprüngliche Nachricht|Message d'origine|Mensaje original|"
    r"Messaggio originale|Mensagem original|原始邮件|原始郵件)\s*-{2,}\s*$",
    re.I,
)
_RULE_RE = re.compile(r"^\s*_{10,}\s*$")
_HEADER_FROM_RE = re.compile(r"^\s*\*?(From|Von|De|Da|Van|Från|发件人|寄件者)\s*\*?\s*[:：]", re.I)
_HEADER_SENT_RE = re.compile(
    r"^\s*\*?(Sent|Gesendet|Envoyé|Inviato|Enviado|Verzonden|Skickat|发送时间|发送日期|寄件日期)\s*\*?\s*[:：]",
    re.I,
)
_HEADER_DATE_RE = re.compile(r"^\s*\*?(Date|Datum|Fecha|Data|日期)\s*\*?\s*[:：]", re.I)
_HEADER_SUBJECT_RE = re.compile(
    r"^\s*\*?(Subject|Betreff|Objet|Oggetto|Asunto|Assunto|Onderwerp|Ämne|主题|主旨)\s*\*?\s*[:：]", re.I
)
_FORWARDED_RE = re.compile(
    r"(Forwarded message|Begin forwarded message|Weitergeleitete Nachricht|Message transféré|"
    r"Mensaje reenviado|Messaggio inoltrato|转发的邮件|轉寄的郵件)",
    re.I,
)
_LIST_FOOTER_RE = re.compile(r"mailing list", re.I)
# An attribution ("On <date>, X wrote:") in the shapes mail clients write, possibly wrapped over lines.
_ATTRIBUTION_OPENER_RE = re.compile(
    r"^(?:(?:On|Le|Am|El|Il giorno|Il|Em|Op|Den|På|W dniu|Dne|Pada)\b|在|于|於).{3,300}"
    r"(wrote|writes|a écrit|schrieb|escribió|ha scritto|escreveu|schreef|skrev|napisał|pisze|napsal|"
    r"kirjoitti|menulis|写道|寫道)\s*[:：]$|"
    r"^Am\b.{3,200}\bschrieb\b.{1,200}[:：]$",
    re.S,
)
_ATTRIBUTION_LINE_RE = re.compile(
    r"^(?:[A-Z][\w.'-]*\s+){0,3}[A-Z][\w.'-]*\s*(?:<[^<>\s]+>|\([^()]+\))?\s*(?:wrote|writes)\s*:$|"
    r"^.{0,150}<[^<>\s]+@[^<>\s]+>\s*(?:wrote|writes|schrieb am .{1,60}|escribió|a écrit|\S{0,12})\s*[:：]$|"
    r"^[^\s<>]+@[^\s<>]+\s+(?:wrote|writes)\s*:$|"
    r"^Quoting\s.{1,150}:$|"
    r"^.{1,200}(写道|寫道)\s*[:：]$|"
    r"^.{1,200}\bschrieb am\b.{1,80}[:：]$"
)


def trim_reply(text: str) -> str:
    """Keep every line the sender wrote; drop what they quoted, their signature and a quoted original.

    - ``>`` lines are quotes. A quote block that the sender's own text follows (an inline reply) is
      replaced by one ``> …`` line, so each answer still shows that it answers something; its
      attribution line ("On <date>, X wrote:") is kept. A quote block with nothing of the sender's
      after it (top posting) is dropped with its attribution.
    - Everything from a signature line (``-- ``), an Outlook original (``-----Original Message-----``,
      a ``From: ... Sent: ...`` header block, a rule of underscores above one) or a mailing list footer
      to the end is dropped. A forwarded message's header block is kept.
    - "Sent from my iPhone" lines are dropped.
    """
    lines = clean_text(text).split("\n")
    lines = [line for line in lines[: _tail_start(lines)] if not _SENT_FROM_RE.match(line)]
    quoted = [line.lstrip().startswith(">") for line in lines]
    blocks: list[
        tuple[int, int, int]
    ] = []  # (first line of the block or of its attribution, first quoted line, end)
    i = 0
    while i < len(lines):
        if not quoted[i]:
            i += 1
            continue
        end = i
        while end < len(lines) and (quoted[end] or not lines[end].strip()):
            end += 1
        while not quoted[end - 1]:  # blank lines after the block are not part of it
            end -= 1
        low = blocks[-1][2] if blocks else 0
        blocks.append((_attribution_start(lines, i, low), i, end))
        i = end
    tail = len(lines)
    trailing = 0
    for start, _, end in reversed(blocks):
        if any(line.strip() for line in lines[end:tail]):
            break
        tail, trailing = start, trailing + 1
    out: list[str] = []
    at = 0
    for _, first, end in blocks[: len(blocks) - trailing]:
        out.extend(lines[at:first])
        out.append(QUOTE_MARKER)
        at = end
    out.extend(lines[at:tail])
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _tail_start(lines: list[str]) -> int:
    """Where the sender's text ends: a signature, a quoted original or a list footer starts there."""
    for i, line in enumerate(lines):
        if _SIGNATURE_RE.match(line) or _ORIGINAL_RE.match(line):
            return i
        if _RULE_RE.match(line):
            following = _next_text(lines, i)
            if following is not None and (
                _HEADER_FROM_RE.match(following) or _LIST_FOOTER_RE.search(following)
            ):
                return i
        if _HEADER_FROM_RE.match(line) and _is_reply_header(lines, i):
            return i
    return len(lines)


def _is_reply_header(lines: list[str], i: int) -> bool:
    """``From:`` followed within a few lines by ``Subject:`` and ``Sent:`` (or ``Date:`` when the
    ``From:`` line holds an address): the header of a quoted original. Not when a "Forwarded message"
    line right above says it is a forward, whose text is kept; not an itinerary's "From: Lisbon"."""
    below = lines[i + 1 : i + 6]
    if not any(_HEADER_SUBJECT_RE.match(line) for line in below):
        return False
    sent = any(_HEADER_SENT_RE.match(line) for line in below)
    dated = "@" in lines[i] and any(_HEADER_DATE_RE.match(line) for line in below)
    above = [line for line in lines[max(0, i - 3) : i] if line.strip()]
    return (sent or dated) and not any(_FORWARDED_RE.search(line) for line in above)


def _next_text(lines: list[str], i: int) -> str | None:
    return next((line for line in lines[i + 1 :] if line.strip()), None)


def _attribution_start(lines: list[str], quote: int, low: int) -> int:
    """The first line of the attribution just above the quote starting at ``quote`` (blank lines may
    separate them), or ``quote`` itself when there is none. Lines before ``low`` are not looked at."""
    k = quote - 1
    while k >= low and not lines[k].strip():
        k -= 1
    if k < low or lines[k].lstrip().startswith(">"):
        return quote
    for n in (1, 2, 3):  # a wrapped attribution ("On Mon, ... Bob Example <" / "bob@x.com> wrote:")
        first = k - n + 1
        if first < low or any(not line.strip() or line.lstrip().startswith(">") for line in lines[first:k]):
            break
        joined = " ".join(line.strip() for line in lines[first : k + 1])
        if len(joined) <= 300 and _ATTRIBUTION_OPENER_RE.match(joined):
            return first
    if _ATTRIBUTION_LINE_RE.match(lines[k].strip()):
        return k
    return quote
