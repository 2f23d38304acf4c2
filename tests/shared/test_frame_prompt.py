# test_frame_prompt.py: the PROMPT frame (0x14): body layout, checks, the doc vector, allocation-free writer/reader.
from array import array

import testkit
from shared import frame, frame_host



def pack_prompt(base, ids, unverified=False):
    return frame_host.pack_body(frame.PROMPT, base=base, n=len(ids), flags=1 if unverified else 0, ids=ids)


def _vector_names():
    out = []
    with open("docs/PROTOCOL.md") as f:
        for line in f:
            if line.startswith("vector "):
                out.append(line.split()[1])
    return out


def test_prompt_body_round_trip_checks_and_vector():
    names = _vector_names()
    assert "prompt_unverified" in names, "docs/PROTOCOL.md should hold the PROMPT vector"
    b = pack_prompt(4000, [1, 2, 0x1234, 49151, 0], unverified=True)
    assert len(b) == frame.PR_IDS + 10
    f = frame_host.parse_body(frame.PROMPT, b)
    assert f["base"] == 4000 and f["n"] == 5 and f["flags"] == frame.PR_UNVERIFIED
    assert f["ids"] == [1, 2, 0x1234, 49151, 0]
    full = pack_prompt((1 << 30) - 1, list(range(255)))
    assert frame.check_body(frame.PROMPT, full, 0, len(full)) == frame.BODY_OK
    bad = [(b[:5], frame.BODY_SHORT), (b[:-1], frame.BODY_OVERRUN), (b + b"\x00\x00", frame.BODY_TRAILING)]
    x = bytearray(b)
    x[3] = 0x40  # base >= 2**30
    bad.append((x, frame.BODY_FIELD))
    x = bytearray(b)
    x[4] = 0  # n = 0
    bad.append((x, frame.BODY_FIELD))
    x = bytearray(b)
    x[5] = 2  # unknown flag bit
    bad.append((x, frame.BODY_FIELD))
    for body, code in bad:
        assert frame.check_body(frame.PROMPT, body, 0, len(body)) == code, (bytes(body), code)
        e = testkit.raises(frame.FrameError, frame_host.parse_body, frame.PROMPT, body)
        assert frame_host.BODY_ERRORS[code] in str(e)
    testkit.raises(frame.FrameError, pack_prompt, 0, [])
    testkit.raises(frame.FrameError, pack_prompt, 0, list(range(256)))
    testkit.raises(frame.FrameError, pack_prompt, 0, [1, 2, 3][:2] + [True])
    testkit.raises(frame.FrameError, pack_prompt, 0, [65536])
    testkit.raises(frame.FrameError, pack_prompt, 1 << 30, [1])
    testkit.raises(frame.FrameError, frame.put_prompt, bytearray(16), 0, [1], 0, 0, 0)


def test_prompt_writer_and_reader_allocate_nothing():
    ids = array("i", [7, 300, 65535, 0, 12])
    buf = bytearray(frame.PR_IDS + 2 * 255)
    out = array("i", bytearray(4 * 8))
    res = array("i", [0, 0, 0])

    def run(_):
        n = frame.put_prompt(buf, 1000, ids, 1, 4, frame.PR_UNVERIFIED)
        res[0] = n
        res[1] = frame.check_body(frame.PROMPT, buf, 0, n)
        res[2] = frame.prompt_ids(buf, 0, out) + frame.u32s(buf, 0) + buf[5]

    testkit.run_locked(run, 0)
    assert res[0] == frame.PR_IDS + 8 and res[1] == frame.BODY_OK and res[2] == 4 + 1000 + 1
    assert list(out[:4]) == [300, 65535, 0, 12]
    assert bytes(buf[:res[0]]) == pack_prompt(1000, [300, 65535, 0, 12], unverified=True)
    testkit.raises(frame.FrameError, frame.prompt_ids, buf, 0, array("i", [0]))
