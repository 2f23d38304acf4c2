# sha256_halves.py: SHA-256's compression in 16-bit halves of plain bytecode (no native code needed).
"""The halves engine of shared/sha256.py, in a module of its own so that a board whose viper engine runs never
carries this bytecode on its heap: every 32-bit word is held as two 16-bit halves, so no value reaches 2**20
and nothing allocates where small ints have 31 bits (RP2040, ESP32). What runs where no native code does
(shared/sha256.py new(); CircuitPython uses its firmware's hashlib first).
"""


def _add(st, i, hi, lo):
    # state word i (little-endian bytes) += hi:lo, mod 2**32, in 16-bit steps
    p = i << 2
    lo += st[p] | (st[p + 1] << 8)
    hi += (st[p + 2] | (st[p + 3] << 8)) + (lo >> 16)
    st[p] = lo & 0xFF
    st[p + 1] = (lo >> 8) & 0xFF
    st[p + 2] = hi & 0xFF
    st[p + 3] = (hi >> 8) & 0xFF


def compress_halves(st, w, buf, off):
    """The compression function in 16-bit halves: the 64-byte block at buf[off] into st (8 little-endian
    words); w is array('H', 256): the schedule (word t's high half at 2t, low half at 2t+1), then from 128 the
    round constants in the same halves (Sha256 puts them there). A rotation takes the bits that cross halves
    by masking before the shift, so nothing passes 2**16 but the sums."""
    for t in range(16):
        p = off + (t << 2)
        w[2 * t] = (buf[p] << 8) | buf[p + 1]
        w[2 * t + 1] = (buf[p + 2] << 8) | buf[p + 3]
    for t in range(32, 128, 2):  # word t // 2, from words -16, -15, -7 and -2
        xh = w[t - 30]
        xl = w[t - 29]
        yh = w[t - 4]
        yl = w[t - 3]
        # s0 = rotr7 ^ rotr18 ^ shr3 of word -15; s1 = rotr17 ^ rotr19 ^ shr10 of word -2
        lo = (w[t - 31] + w[t - 13]
              + (((xl >> 7) | ((xh & 0x7F) << 9)) ^ ((xh >> 2) | ((xl & 3) << 14)) ^ ((xl >> 3) | ((xh & 7) << 13)))
              + (((yh >> 1) | ((yl & 1) << 15)) ^ ((yh >> 3) | ((yl & 7) << 13)) ^ ((yl >> 10) | ((yh & 0x3FF) << 6))))
        w[t] = (w[t - 32] + w[t - 14] + (lo >> 16)
                + (((xh >> 7) | ((xl & 0x7F) << 9)) ^ ((xl >> 2) | ((xh & 3) << 14)) ^ (xh >> 3))
                + (((yl >> 1) | ((yh & 1) << 15)) ^ ((yl >> 3) | ((yh & 7) << 13)) ^ (yh >> 10))) & 0xFFFF
        w[t + 1] = lo & 0xFFFF
    al = st[0] | (st[1] << 8)
    ah = st[2] | (st[3] << 8)
    bl = st[4] | (st[5] << 8)
    bh = st[6] | (st[7] << 8)
    cl = st[8] | (st[9] << 8)
    ch = st[10] | (st[11] << 8)
    dl = st[12] | (st[13] << 8)
    dh = st[14] | (st[15] << 8)
    el = st[16] | (st[17] << 8)
    eh = st[18] | (st[19] << 8)
    fl = st[20] | (st[21] << 8)
    fh = st[22] | (st[23] << 8)
    gl = st[24] | (st[25] << 8)
    gh = st[26] | (st[27] << 8)
    hl = st[28] | (st[29] << 8)
    hh = st[30] | (st[31] << 8)
    for t in range(64):
        # t1 = h + S1(e) + Ch(e, f, g) + K[t] + W[t], S1 = rotr6 ^ rotr11 ^ rotr25, halves not yet carried
        t1l = (hl + w[129 + 2 * t] + w[2 * t + 1] + (gl ^ (el & (fl ^ gl)))
               + (((el >> 6) | ((eh & 0x3F) << 10)) ^ ((el >> 11) | ((eh & 0x7FF) << 5))
                  ^ ((eh >> 9) | ((el & 0x1FF) << 7))))
        t1h = (hh + w[128 + 2 * t] + w[2 * t] + (gh ^ (eh & (fh ^ gh)))
               + (((eh >> 6) | ((el & 0x3F) << 10)) ^ ((eh >> 11) | ((el & 0x7FF) << 5))
                  ^ ((el >> 9) | ((eh & 0x1FF) << 7))))
        # t2 = S0(a) + Maj(a, b, c), S0 = rotr2 ^ rotr13 ^ rotr22
        t2l = ((((al >> 2) | ((ah & 3) << 14)) ^ ((al >> 13) | ((ah & 0x1FFF) << 3))
                ^ ((ah >> 6) | ((al & 0x3F) << 10))) + ((al & bl) | (cl & (al | bl))))
        t2h = ((((ah >> 2) | ((al & 3) << 14)) ^ ((ah >> 13) | ((al & 0x1FFF) << 3))
                ^ ((al >> 6) | ((ah & 0x3F) << 10))) + ((ah & bh) | (ch & (ah | bh))))
        hl = gl
        hh = gh
        gl = fl
        gh = fh
        fl = el
        fh = eh
        el = dl + t1l
        eh = (dh + t1h + (el >> 16)) & 0xFFFF
        el &= 0xFFFF
        dl = cl
        dh = ch
        cl = bl
        ch = bh
        bl = al
        bh = ah
        al = t1l + t2l
        ah = (t1h + t2h + (al >> 16)) & 0xFFFF
        al &= 0xFFFF
    _add(st, 0, ah, al)
    _add(st, 1, bh, bl)
    _add(st, 2, ch, cl)
    _add(st, 3, dh, dl)
    _add(st, 4, eh, el)
    _add(st, 5, fh, fl)
    _add(st, 6, gh, gl)
    _add(st, 7, hh, hl)
