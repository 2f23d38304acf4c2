# episode.py: the text of a node's token stream: the system prompt, then episodes "log lines + \nNote: annotation\n".
# One function per piece, used by the node (firmware drafter), the gateway and the corpus/training tools
# (tools/train/corpus.py), so every side tokenizes exactly the same characters. Allocates strings: call it once
# per episode, never per token. The stream, token by token (docs/SPECDEC.md and docs/PROTOCOL.md: PROMPT frames, drafts):
#   system_prompt()                               -> the first PROMPT (fills the sink)
#   prompt_text(lines, after_cap)                 -> each episode's PROMPT: the lines, then the cue
#   ... drafted annotation tokens, until a token whose bytes hold b"\n" (is_stop) or MAX_NOTE tokens
SYSTEM = ("<|im_start|>system\nYou watch a plant's machine log. After each log excerpt write one short note: "
          "which machine, what is happening, what to check.<|im_end|>\n")
CUE = "\nNote:"
MAX_LINES = 4  # log lines per episode, at most (the node's window is small: rp2040 keeps 28 tokens)
MAX_NOTE = 16  # annotation tokens per episode, at most (the stop token included)
SUMMARY_S = 600  # plant seconds between periodic summary episodes (the node's default summary_s)
_TS = 21  # "2026-11-30T06:50:28Z " : a plant log line's timestamp and its space
# Which lines start an episode (docs/NODE.md, What the node annotates): the plant's event lines, by their
# first word after the timestamp. A tick holding any of them is an event episode (its event lines, the
# last MAX_LINES); a tick with none may be a periodic summary episode (its sample lines).
EVENT_HEADS = ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE", "STATE", "LOST")
_EVENT_WORDS = tuple(h.encode() for h in EVENT_HEADS)  # is_event_at compares bytes


class EpisodeError(ValueError):
    """A log line or annotation that cannot be formatted (the message says which)."""


def system_prompt():
    """The stream's first text: encode it with special=True (it holds the chat control tokens)."""
    return SYSTEM


def prompt_line(line):
    """One log line as the model sees it: without its timestamp and trailing newline (the time costs
    20 digit tokens and predicts nothing the note says)."""
    if not isinstance(line, str):
        raise EpisodeError("a log line must be a str, got %s" % type(line).__name__)
    n = len(line)
    while n and (line[n - 1] == "\n" or line[n - 1] == "\r"):
        n -= 1
    s = line[:n]
    if n > _TS and s[4] == "-" and s[10] == "T" and s[19] == "Z" and s[20] == " ":
        s = s[_TS:]
    if not s or "\n" in s:
        raise EpisodeError("log line %r is empty or holds a newline" % (line,))
    return s


def prompt_text(lines, after_cap=False):
    """An episode's prompt: its log lines (at most MAX_LINES, the last ones kept), one per line, then
    the cue. after_cap: the previous note ended at MAX_NOTE without a newline, so one is put first."""
    if isinstance(lines, str):
        lines = [lines]
    if not lines:
        raise EpisodeError("an episode needs at least one log line")
    if len(lines) > MAX_LINES:
        lines = lines[len(lines) - MAX_LINES:]
    out = "\n" if after_cap else ""
    for i in range(len(lines)):
        out += prompt_line(lines[i])
        if i + 1 < len(lines):
            out += "\n"
    return out + CUE


def episode_text(lines, note, after_cap=False):
    """A whole episode as text: prompt_text + the note. A finished note starts with a space and ends
    with a newline (its stop token)."""
    if not isinstance(note, str):
        raise EpisodeError("a note must be a str, got %s" % type(note).__name__)
    return prompt_text(lines, after_cap) + note


def is_event(line):
    """True for a plant event line (str, with its timestamp): an alarm raised, acknowledged, cleared,
    (un)shelved, a state change (a trip among them) or LOST; False for a sample line."""
    return line[_TS:].split(" ", 1)[0] in EVENT_HEADS


def is_event_at(buf, off, n):
    """is_event for the bytes buf[off:off+n] of a plant line, allocation-free (the node's hot path): the
    first word after the timestamp, compared byte by byte with each event word. Not a first-letter test: any
    plant's machine ids start a sample line, and AHU-1, CLR-7, ALM-1 or STATX share a first letter (or more)
    with an event word."""
    s = off + _TS
    end = off + n
    for w in _EVENT_WORDS:
        k = len(w)
        if s + k > end or (s + k < end and buf[s + k] != 32):  # the word must end at a space or the line's end
            continue
        i = 0
        while i < k and buf[s + i] == w[i]:
            i += 1
        if i == k:
            return True
    return False


def is_stop(token_bytes):
    """True for a token that ends a note: its bytes hold a newline (EOS ids are checked by the caller)."""
    for b in token_bytes:
        if b == 10:
            return True
    return False
