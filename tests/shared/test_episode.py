# test_episode.py: the stream text (shared/episode.py) on CPython and MicroPython: exact characters, errors.
import testkit
from shared import episode


def test_system_prompt_is_a_chat_turn():
    s = episode.system_prompt()
    assert s.startswith("<|im_start|>system\n")
    assert s.endswith("<|im_end|>\n")


def test_prompt_line_drops_the_timestamp_and_newline():
    assert episode.prompt_line("2026-11-30T06:50:28Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB\n") == \
        "STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB"
    assert episode.prompt_line("ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED") == \
        "ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED"
    assert episode.prompt_line("2026-11-30T06:50:28Z LOST events=3\r\n") == "LOST events=3"


def test_prompt_and_episode_text_exact():
    lines = ["2026-11-30T06:50:28Z ALARM HIHI P-101 vibration 11.4mm/s prio=4 RAISED",
             "2026-11-30T06:50:28Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB"]
    want = "ALARM HIHI P-101 vibration 11.4mm/s prio=4 RAISED\nSTATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB\nNote:"
    assert episode.prompt_text(lines) == want
    assert episode.prompt_text(lines, True) == "\n" + want
    assert episode.prompt_text(lines[1]) == "STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB\nNote:"
    assert episode.episode_text(lines, " P-101 tripped.\n") == want + " P-101 tripped.\n"


def test_only_the_last_max_lines_are_kept():
    lines = ["LOST events=%d" % i for i in range(episode.MAX_LINES + 3)]
    text = episode.prompt_text(lines)
    assert text.count("\n") == episode.MAX_LINES  # MAX_LINES - 1 between lines, one before the cue
    assert text.startswith("LOST events=3\n")


def test_is_stop():
    assert episode.is_stop(b"\n")
    assert episode.is_stop(b".\n\n")
    assert not episode.is_stop(b" P")
    assert not episode.is_stop(b"")


def test_bad_input_is_a_clear_error():
    e = testkit.raises(episode.EpisodeError, episode.prompt_text, [])
    assert "at least one" in str(e)
    testkit.raises(ValueError, episode.prompt_line, 42)
    testkit.raises(episode.EpisodeError, episode.prompt_line, "\r\n")
    testkit.raises(episode.EpisodeError, episode.prompt_line, "two\nlines")
    testkit.raises(episode.EpisodeError, episode.episode_text, ["x"], None)


_TIME = "2026-11-30T06:50:28Z "
# Sample lines of plants whose ids share letters (or a whole prefix) with an event word: none is an event.
_SAMPLES = ("AHU-1 RUNNING SAT=14.2C RAT=21.0C", "SILO-2 STOPPED L=3.40m", "SILO_2 STOPPED L=3.40m",
            "CLR-7 RUNNING T=4.1C", "ALM-1 STOPPED DI=1on", "STATX RUNNING P=1.0bar", "ACKR-3 RUNNING I=2A",
            "LOSTX STOPPED F=0.0m3/h", "SHELVES-1 RUNNING W=3kg", "UNSHELVE_2 STOPPED X=1%",
            "ALARM-1 RUNNING V=1.0mm/s", "C-301 RUNNING T=1.0C", "P-101 RUNNING vib=2.1mm/s",
            "PLANT name=pump-skid-1 hash=0123456789abcdef machines=1 signals=3")
_EVENTS = ("ALARM HI AHU-1 supply_temp 18.2C prio=2 RAISED", "ACK HI SILO-2 level 9.1m prio=3 ACKED by=alice",
           "CLEAR HI CLR-7 temp 4.0C prio=2 NORMAL", "SHELVE HI ALM-1 contact 1 prio=1 SHELVED by=bob",
           "UNSHELVE HI ALM-1 contact 1 prio=1 RAISED", "STATE STATX RUNNING->TRIPPED interlock=HIHI_P",
           "LOST events=3")


def _event_at(arg):
    """is_event_at over every (line bytes, want) pair, counting the wrong answers: allocates nothing."""
    wrong = 0
    for buf, want in arg:
        if episode.is_event_at(buf, 0, len(buf)) != want:
            wrong += 1
    return wrong


def test_is_event_reads_the_whole_first_word():
    cases = [(bytes(_TIME + s, "ascii"), False) for s in _SAMPLES] + \
            [(bytes(_TIME + s, "ascii"), True) for s in _EVENTS]
    for buf, want in cases:
        s = str(buf, "ascii")
        assert episode.is_event(s) == want, s
        assert episode.is_event(s + "\n") == want, s
        assert episode.is_event_at(buf, 0, len(buf)) == want, s
    assert testkit.run_locked(_event_at, cases) == 0
    # at an offset in a larger buffer, and a word cut short by n is not the word
    buf = bytearray(b"xx" + bytes(_TIME + "LOST events=1", "ascii") + b"STATE")
    assert episode.is_event_at(buf, 2, len(buf) - 7)
    assert not episode.is_event_at(buf, 2, len(_TIME) + 3)  # "LOS"
    assert episode.is_event_at(bytes(_TIME + "LOST", "ascii"), 0, len(_TIME) + 4)  # the word alone, at the end
    assert not episode.is_event_at(b"short", 0, 5)
