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
