# q4_viper.py: @micropython.viper versions of the q4 and fixedmath kernels (MicroPython with native code).
"""Import it only inside try/except (SyntaxError, ImportError): shared/kernels.py does.

Viper ints are machine words: 32-bit on RP2040/ESP32-S3 (wrapping), 64-bit on the unix port. Every
intermediate here stays below 2**31 in magnitude (the bounds are proved in q4.py, fixedmath.py and
docs/KERNELS.md), so both word sizes give the plain reference's integers. Two portability rules:
- ptr32 loads are zero-extended on 64-bit hosts: signed int32 values are sign-extended with
  (v ^ SX) - SX, SX = 1 << 31 built at run time (identity on 32-bit boards);
- no literal >= 2**30 (mpy-cross rejects it for 32-bit targets); 2**30 is formed at run time
  as LIM + ... + 1 (LIM + 1 alone would be folded into such a literal).
Each function takes at most 4 arguments (viper's limit); extra parameters travel in an 'i' array.
"""
import micropython

from shared.fixedmath import EXP_TAB as _EXP, SIG_TAB as _SIG
from shared.compat import const

LIM = const(0x3FFFFFFF)  # == q4.LIM, the Q16 saturation bound (a const here: viper code reads no globals)
HDR = const(8)        # == q4.I_HDR; the header fields are read at the indexes of q4.I_*
EXP_A = const(192)    # == fixedmath.EXP_A
EXP_B = const(384)    # == fixedmath.EXP_B
EXP_END = const(0x180000)  # == fixedmath.EXP_END


@micropython.viper
def v_quantize_act(x, q, info):
    px = ptr32(x)
    pq = ptr8(q)
    pi = ptr32(info)
    sx = 31
    SX = 1 << sx
    ng = pi[6]
    h = pi[7]
    emax = 0
    g = 0
    base = 0
    while g < ng:
        amax = 0
        i = base
        while i < base + 32:
            v = (px[i] ^ SX) - SX
            if v > LIM:
                v = LIM
            elif v < 0 - LIM:
                v = 0 - LIM
            if v < 0:
                v = 0 - v
            if v > amax:
                amax = v
            i += 1
        e = 0
        while ((amax + ((1 << e) >> 1)) >> e) > 127:
            e += 1
        half = (1 << e) >> 1
        s = 0
        i = base
        while i < base + 32:
            v = (px[i] ^ SX) - SX
            if v > LIM:
                v = LIM
            elif v < 0 - LIM:
                v = 0 - LIM
            v = (v + half) >> e
            pq[i] = v + 128
            s += v
            i += 1
        pi[HDR + g] = e
        pi[HDR + ng + g] = s
        if e > emax:
            emax = e
        base += 32
        g += 1
    g = 0
    while g < ng:
        pi[HDR + g] = emax - pi[HDR + g] + h
        g += 1
    pi[5] = emax + h


@micropython.viper
def v_matvec(out, mat, q, info):
    # One group = 16 weight bytes x 32 activation bytes, unrolled. Weights are n = q_w + 8 and
    # activations u = q_a + 128, both unsigned, so no sign extension in the loop:
    # sum(q_w * q_a) = sum(n * u) - 128 * sum(n) - 8 * sum(q_a); sum(n) of the group comes from four
    # 32-bit loads, adding the nibbles of 4 bytes at a time (each byte lane stays <= 4 * 30 = 120).
    pi = ptr32(info)
    sx = 31
    SX = 1 << sx
    r0 = pi[0]
    r1 = pi[1]
    half = pi[2] >> 1
    sh = pi[5] - ((pi[3] ^ SX) - SX)
    ng = pi[6]
    po = ptr32(out)
    ps = ptr16(mat.scales)
    q0 = uint(ptr8(q))
    m = 0
    if sh >= 0 and sh <= 30:
        m = LIM >> sh
    wb = uint(ptr8(mat.buf)) + uint(r0 * half)
    si = r0 * ng
    r = r0
    while r < r1:
        pa = ptr8(q0)
        t = 0
        g = 0
        while g < ng:
            pb = ptr8(wb)
            b = pb[0]
            acc = (b & 15) * pa[0] + (b >> 4) * pa[1]
            b = pb[1]
            acc += (b & 15) * pa[2] + (b >> 4) * pa[3]
            b = pb[2]
            acc += (b & 15) * pa[4] + (b >> 4) * pa[5]
            b = pb[3]
            acc += (b & 15) * pa[6] + (b >> 4) * pa[7]
            b = pb[4]
            acc += (b & 15) * pa[8] + (b >> 4) * pa[9]
            b = pb[5]
            acc += (b & 15) * pa[10] + (b >> 4) * pa[11]
            b = pb[6]
            acc += (b & 15) * pa[12] + (b >> 4) * pa[13]
            b = pb[7]
            acc += (b & 15) * pa[14] + (b >> 4) * pa[15]
            b = pb[8]
            acc += (b & 15) * pa[16] + (b >> 4) * pa[17]
            b = pb[9]
            acc += (b & 15) * pa[18] + (b >> 4) * pa[19]
            b = pb[10]
            acc += (b & 15) * pa[20] + (b >> 4) * pa[21]
            b = pb[11]
            acc += (b & 15) * pa[22] + (b >> 4) * pa[23]
            b = pb[12]
            acc += (b & 15) * pa[24] + (b >> 4) * pa[25]
            b = pb[13]
            acc += (b & 15) * pa[26] + (b >> 4) * pa[27]
            b = pb[14]
            acc += (b & 15) * pa[28] + (b >> 4) * pa[29]
            b = pb[15]
            acc += (b & 15) * pa[30] + (b >> 4) * pa[31]
            pw = ptr32(wb)
            v = pw[0]
            ns = (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[1]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[2]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[3]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            ns = (ns & 255) + ((ns >> 8) & 255) + ((ns >> 16) & 255) + ((ns >> 24) & 255)
            acc -= (ns << 7) + (((pi[HDR + ng + g] ^ SX) - SX) << 3)
            s = pi[HDR + g]
            if s <= 30:
                t += (acc * ps[si] + ((1 << s) >> 1)) >> s
            si += 1
            wb += 16
            pa = ptr8(uint(pa) + 32)
            g += 1
        if sh >= 0:
            if t > m:
                t = LIM
            elif t < 0 - m:
                t = 0 - LIM
            else:
                t = t << sh
        elif sh < -30:
            t = 0
        else:
            t = (t + (1 << (-1 - sh))) >> (0 - sh)
        po[r - r0] = t
        r += 1


@micropython.viper
def v_matvec_asym(out, mat, q, info):
    # v_matvec plus the asymmetric term: per group (acc * ws + asum * mf + half) >> s, with ws < 2**14
    # and |mf| < 2**14 (int16 in mat.mins), so |acc * ws| + |asum * mf| < 2**29 + 2**26.
    # One group = 16 weight bytes x 32 activation bytes, unrolled. Weights are n = q_w + 8 and
    # activations u = q_a + 128, both unsigned, so no sign extension in the loop:
    # sum(q_w * q_a) = sum(n * u) - 128 * sum(n) - 8 * sum(q_a); sum(n) of the group comes from four
    # 32-bit loads, adding the nibbles of 4 bytes at a time (each byte lane stays <= 4 * 30 = 120).
    pi = ptr32(info)
    sx = 31
    SX = 1 << sx
    r0 = pi[0]
    r1 = pi[1]
    half = pi[2] >> 1
    sh = pi[5] - ((pi[3] ^ SX) - SX)
    ng = pi[6]
    po = ptr32(out)
    ps = ptr16(mat.scales)
    pm = ptr16(mat.mins)
    q0 = uint(ptr8(q))
    m = 0
    if sh >= 0 and sh <= 30:
        m = LIM >> sh
    wb = uint(ptr8(mat.buf)) + uint(r0 * half)
    si = r0 * ng
    r = r0
    while r < r1:
        pa = ptr8(q0)
        t = 0
        g = 0
        while g < ng:
            pb = ptr8(wb)
            b = pb[0]
            acc = (b & 15) * pa[0] + (b >> 4) * pa[1]
            b = pb[1]
            acc += (b & 15) * pa[2] + (b >> 4) * pa[3]
            b = pb[2]
            acc += (b & 15) * pa[4] + (b >> 4) * pa[5]
            b = pb[3]
            acc += (b & 15) * pa[6] + (b >> 4) * pa[7]
            b = pb[4]
            acc += (b & 15) * pa[8] + (b >> 4) * pa[9]
            b = pb[5]
            acc += (b & 15) * pa[10] + (b >> 4) * pa[11]
            b = pb[6]
            acc += (b & 15) * pa[12] + (b >> 4) * pa[13]
            b = pb[7]
            acc += (b & 15) * pa[14] + (b >> 4) * pa[15]
            b = pb[8]
            acc += (b & 15) * pa[16] + (b >> 4) * pa[17]
            b = pb[9]
            acc += (b & 15) * pa[18] + (b >> 4) * pa[19]
            b = pb[10]
            acc += (b & 15) * pa[20] + (b >> 4) * pa[21]
            b = pb[11]
            acc += (b & 15) * pa[22] + (b >> 4) * pa[23]
            b = pb[12]
            acc += (b & 15) * pa[24] + (b >> 4) * pa[25]
            b = pb[13]
            acc += (b & 15) * pa[26] + (b >> 4) * pa[27]
            b = pb[14]
            acc += (b & 15) * pa[28] + (b >> 4) * pa[29]
            b = pb[15]
            acc += (b & 15) * pa[30] + (b >> 4) * pa[31]
            pw = ptr32(wb)
            v = pw[0]
            ns = (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[1]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[2]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            v = pw[3]
            ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F)
            ns = (ns & 255) + ((ns >> 8) & 255) + ((ns >> 16) & 255) + ((ns >> 24) & 255)
            asum = (pi[HDR + ng + g] ^ SX) - SX
            acc -= (ns << 7) + (asum << 3)
            s = pi[HDR + g]
            if s <= 30:
                t += (acc * ps[si] + asum * ((pm[si] ^ 0x8000) - 0x8000) + ((1 << s) >> 1)) >> s
            si += 1
            wb += 16
            pa = ptr8(uint(pa) + 32)
            g += 1
        if sh >= 0:
            if t > m:
                t = LIM
            elif t < 0 - m:
                t = 0 - LIM
            else:
                t = t << sh
        elif sh < -30:
            t = 0
        else:
            t = (t + (1 << (-1 - sh))) >> (0 - sh)
        po[r - r0] = t
        r += 1


@micropython.viper
def v_matvec8(out, mat, q, info):
    # Q8Matrix rows: int8 weights (two's complement bytes) x u = q_a + 128; per group
    # acc = sum(w * u) - 128 * sum(w) = sum(w * q_a), |acc| <= 520192, ws < 2**11: |acc * ws| < 2**30.
    pi = ptr32(info)
    sx = 31
    SX = 1 << sx
    r0 = pi[0]
    r1 = pi[1]
    cols = pi[2]
    sh = pi[5] - ((pi[3] ^ SX) - SX)
    ng = pi[6]
    po = ptr32(out)
    ps = ptr16(mat.scales)
    pq = ptr8(q)
    pw = ptr8(mat.buf)
    m = 0
    if sh >= 0 and sh <= 30:
        m = LIM >> sh
    wi = r0 * cols
    si = r0 * ng
    r = r0
    while r < r1:
        t = 0
        qi = 0
        g = 0
        while g < ng:
            acc = 0
            ns = 0
            end = wi + 32
            while wi < end:
                w = (pw[wi] ^ 128) - 128
                acc += w * pq[qi]
                ns += w
                wi += 1
                qi += 1
            acc -= ns << 7
            s = pi[HDR + g]
            if s <= 30:
                t += (acc * ps[si] + ((1 << s) >> 1)) >> s
            si += 1
            g += 1
        if sh >= 0:
            if t > m:
                t = LIM
            elif t < 0 - m:
                t = 0 - LIM
            else:
                t = t << sh
        elif sh < -30:
            t = 0
        else:
            t = (t + (1 << (-1 - sh))) >> (0 - sh)
        po[r - r0] = t
        r += 1


@micropython.viper
def v_group_dots8(out, w, q, info):
    pi = ptr32(info)
    po = ptr32(out)
    pq = ptr8(q)
    pw = ptr8(w)
    ng = pi[6]
    wi = pi[0] * pi[2]
    qi = 0
    g = 0
    while g < ng:
        acc = 0
        end = wi + 32
        while wi < end:
            acc += ((pw[wi] ^ 128) - 128) * (pq[qi] - 128)
            qi += 1
            wi += 1
        po[g] = acc
        g += 1


@micropython.viper
def v_group_dots(out, w, q, info):
    pi = ptr32(info)
    po = ptr32(out)
    pq = ptr8(q)
    pw = ptr8(w)
    half = pi[2] >> 1
    ng = pi[6]
    wi = pi[0] * half
    qi = 0
    g = 0
    while g < ng:
        acc = 0
        end = wi + 16
        while wi < end:
            b = pw[wi]
            acc += ((b & 15) - 8) * (pq[qi] - 128) + ((b >> 4) - 8) * (pq[qi + 1] - 128)
            qi += 2
            wi += 1
        po[g] = acc
        g += 1


@micropython.viper
def v_rmsnorm(out, x, gain, info):
    pi = ptr32(info)
    px = ptr32(x)
    po = ptr32(out)
    pg = ptr16(gain)
    sx = 31
    SX = 1 << sx
    n = pi[0]
    gs = (pi[1] ^ SX) - SX
    m = pi[3]
    kmin = (pi[4] ^ SX) - SX
    amax = 0
    i = 0
    while i < n:
        v = (px[i] ^ SX) - SX
        if v > LIM:
            v = LIM
        elif v < 0 - LIM:
            v = 0 - LIM
        if v < 0:
            v = 0 - v
        if v > amax:
            amax = v
        i += 1
    k = 0
    while amax >> k:
        k += 1
    k -= 15  # bitlen(amax) - 15
    if k < kmin:
        k = kmin
    hm = (1 << m) >> 1
    ss = 0
    i = 0
    while i < n:
        v = (px[i] ^ SX) - SX
        if v > LIM:
            v = LIM
        elif v < 0 - LIM:
            v = 0 - LIM
        if v < 0:
            v = 0 - v
        if k >= 0:
            v = v >> k
        else:
            v = v << (0 - k)
        ss += (v * v + hm) >> m
        i += 1
    q1 = ss // n
    mean = (q1 << m) + (((ss - q1 * n) << m) // n)
    if k >= 0:
        if 2 * k < 31:
            mean += pi[2] >> (2 * k)
    else:
        mean += pi[2] << (0 - 2 * k)
    if mean == 0:
        i = 0
        while i < n:
            po[i] = 0
            i += 1
        return
    j = 0
    if mean > LIM:
        mean = mean >> 2
        j = -1
    else:
        while mean < 0x10000000:
            mean = mean << 2
            j += 1
    s = 0
    b = 0x10000000
    while b:
        if mean >= s + b:
            mean -= s + b
            s = (s >> 1) + b
        else:
            s = s >> 1
        b = b >> 2
    r = (0x20000000 + (s >> 1)) // s
    s1 = k + 6 - j
    s2 = 7 + gs
    i = 0
    while i < n:
        xa = (px[i] ^ SX) - SX
        if xa > LIM:
            xa = LIM
        elif xa < 0 - LIM:
            xa = 0 - LIM
        fr = r
        neg = 0
        if xa < 0:
            xa = 0 - xa
            neg = 1
        if fr < 0:
            fr = 0 - fr
            neg = 1 - neg
        u = (xa >> 15) * fr
        v = (xa & 32767) * fr
        if s1 >= 15:
            if s1 > 45:
                q = 0
            elif s1 == 15:
                q = u + ((v + 16384) >> 15)
            else:
                q = (u + (v >> 15) + (1 << (s1 - 16))) >> (s1 - 15)
        elif s1 > 0:
            if u > (LIM >> (15 - s1)):
                q = LIM
            else:
                q = (u << (15 - s1)) + ((v + (1 << (s1 - 1))) >> s1)
        elif u >= 32768 or s1 < -30:
            q = 0
            if u or v:
                q = LIM
        else:
            q = (u << 15) + v
            if q > (LIM >> (0 - s1)):
                q = LIM
            else:
                q = q << (0 - s1)
        if q > LIM:
            q = LIM
        if neg:
            q = 0 - q
        ya = q
        fg = (pg[i] ^ 0x8000) - 0x8000
        neg = 0
        if ya < 0:
            ya = 0 - ya
            neg = 1
        if fg < 0:
            fg = 0 - fg
            neg = 1 - neg
        u = (ya >> 15) * fg
        v = (ya & 32767) * fg
        if s2 >= 15:
            if s2 > 45:
                q = 0
            elif s2 == 15:
                q = u + ((v + 16384) >> 15)
            else:
                q = (u + (v >> 15) + (1 << (s2 - 16))) >> (s2 - 15)
        elif s2 > 0:
            if u > (LIM >> (15 - s2)):
                q = LIM
            else:
                q = (u << (15 - s2)) + ((v + (1 << (s2 - 1))) >> s2)
        elif u >= 32768 or s2 < -30:
            q = 0
            if u or v:
                q = LIM
        else:
            q = (u << 15) + v
            if q > (LIM >> (0 - s2)):
                q = LIM
            else:
                q = q << (0 - s2)
        if q > LIM:
            q = LIM
        if neg:
            q = 0 - q
        po[i] = q
        i += 1


@micropython.viper
def v_rope(out, x, tab, info):
    pi = ptr32(info)
    px = ptr32(x)
    po = ptr32(out)
    pt = ptr16(tab)
    sx = 31
    SX = 1 << sx
    hd = pi[0]
    half = hd >> 1
    style = pi[1]
    row = pi[2] * hd
    heads = pi[3]
    h = 0
    while h < heads:
        o = h * hd
        i = 0
        while i < half:
            c = (pt[row + i] ^ 0x8000) - 0x8000
            s = (pt[row + half + i] ^ 0x8000) - 0x8000
            if style:
                ia = o + i
                ib = ia + half
            else:
                ia = o + 2 * i
                ib = ia + 1
            a = (px[ia] ^ SX) - SX
            b = (px[ib] ^ SX) - SX
            if a > LIM:
                a = LIM
            elif a < 0 - LIM:
                a = 0 - LIM
            if b > LIM:
                b = LIM
            elif b < 0 - LIM:
                b = 0 - LIM
            ah = a >> 15
            al = a & 32767
            bh = b >> 15
            bl = b & 32767
            ya = ah * c - bh * s + ((al * c - bl * s + 16384) >> 15)
            yb = ah * s + bh * c + ((al * s + bl * c + 16384) >> 15)
            if ya > LIM:
                ya = LIM
            elif ya < 0 - LIM:
                ya = 0 - LIM
            if yb > LIM:
                yb = LIM
            elif yb < 0 - LIM:
                yb = 0 - LIM
            po[ia] = ya
            po[ib] = yb
            i += 1
        h += 1


@micropython.viper
def v_softmax(out, x, n: int, tab):
    px = ptr32(x)
    po = ptr32(out)
    pt = ptr16(tab)
    sx = 31
    SX = 1 << sx
    mx = 0 - LIM
    i = 0
    while i < n:
        v = (px[i] ^ SX) - SX
        if v > LIM:
            v = LIM
        if v > mx:
            mx = v
        i += 1
    hi = 0
    lo = 0
    i = 0
    while i < n:
        v = (px[i] ^ SX) - SX
        if v > LIM:
            v = LIM
        elif v < 0 - LIM:
            v = 0 - LIM
        d = mx - v
        e = 0
        if d < EXP_END:
            a = d >> 13
            e = pt[a] * pt[EXP_B + ((d >> 7) & 63)]
            e -= ((e >> 8) * (d & 127)) >> 8
            sh = pt[EXP_A + a]  # 15 + exponent - 15 extra bits
            if sh > 30:
                e = 0
            else:
                e = (e + ((1 << sh) >> 1)) >> sh
        po[i] = e
        hi += e >> 15
        lo += e & 32767
        i += 1
    s1 = hi + (lo >> 15)
    k = 0
    while (s1 >> k) >= 65536:
        k += 1
    sm = (s1 + ((1 << k) >> 1)) >> k
    r = (LIM + (sm >> 1) + 1) // sm  # (2**30 + sm/2) // sm
    sh = 14 + k
    rnd = 1 << (sh - 1)
    i = 0
    while i < n:
        po[i] = (((po[i] + 16384) >> 15) * r + rnd) >> sh
        i += 1


@micropython.viper
def v_silu(out, x, n: int, tab):
    px = ptr32(x)
    po = ptr32(out)
    pt = ptr16(tab)
    sx = 31
    SX = 1 << sx
    i = 0
    while i < n:
        v = (px[i] ^ SX) - SX
        if v > LIM:
            v = LIM
        elif v < 0 - LIM:
            v = 0 - LIM
        a = v
        if v < 0:
            a = 0 - v
        if a >= 0x100000:
            y = 0
            if v > 0:
                y = v
        else:
            k = a >> 11
            c = pt[k]
            c = c - (((c - pt[k + 1]) * (a & 2047) + 1024) >> 11)
            mm = (a * c + 32768) >> 16
            if v >= 0:
                y = v - mm
            else:
                y = 0 - mm
        po[i] = y
        i += 1


@micropython.viper
def v_mul(out, a, b, n: int):
    pa = ptr32(a)
    pb = ptr32(b)
    po = ptr32(out)
    sx = 31
    SX = 1 << sx
    i = 0
    while i < n:
        x = (pa[i] ^ SX) - SX
        if x > LIM:
            x = LIM
        elif x < 0 - LIM:
            x = 0 - LIM
        y = (pb[i] ^ SX) - SX
        if y > LIM:
            y = LIM
        elif y < 0 - LIM:
            y = 0 - LIM
        neg = 0
        if x < 0:
            x = 0 - x
            neg = 1
        if y < 0:
            y = 0 - y
            neg = 1 - neg
        xh = x >> 15
        xl = x & 32767
        yh = y >> 15
        yl = y & 32767
        q = xh * yh
        if q >= 65536:
            q = LIM
        else:
            c = xh * yl + xl * yh
            q = q << 14
            if q > LIM - (c >> 1):
                q = LIM
            else:
                q += (c >> 1) + ((((c & 1) << 15) + xl * yl + 32768) >> 16)
                if q > LIM:
                    q = LIM
        if neg:
            q = 0 - q
        po[i] = q
        i += 1


# ---- the backend interface of shared/kernels.py (arguments already checked there) ----

def quantize_act(act, x):
    v_quantize_act(x, act.q, act.info)


@micropython.viper
def dot_i8(a, b, info) -> int:
    # fixedmath.dot_i8: a int32 (sign-extended on 64-bit hosts), b int8 (ptr8 reads it unsigned)
    pi = ptr32(info)
    pa = ptr32(a)
    pb = ptr8(b)
    sx = 31
    SX = 1 << sx
    ao = pi[0]
    bo = pi[1]
    n = pi[2]
    d = 0
    i = 0
    while i < n:
        d += ((pa[ao + i] ^ SX) - SX) * ((pb[bo + i] ^ 128) - 128)
        i += 1
    return d


@micropython.viper
def axpy_i8(out, b, info):
    # fixedmath.axpy_i8: the stored low 32 bits are the same on 32- and 64-bit words
    pi = ptr32(info)
    po = ptr32(out)
    pb = ptr8(b)
    oo = pi[0]
    bo = pi[1]
    n = pi[2]
    u = pi[3]
    i = 0
    while i < n:
        po[oo + i] = po[oo + i] + u * ((pb[bo + i] ^ 128) - 128)
        i += 1


def matvec(out, mat, act, r0, r1):
    k = mat.kind  # kernels.matvec wrote r0, r1 and wshift into info
    if k == 0:
        v_matvec(out, mat, act.q, act.info)
    elif k == 1:
        v_matvec_asym(out, mat, act.q, act.info)
    else:
        v_matvec8(out, mat, act.q, act.info)


def group_dots(out, mat, act, row):
    if mat.kind == 2:  # kernels.group_dots wrote row into info
        v_group_dots8(out, mat.buf, act.q, act.info)
    else:
        v_group_dots(out, mat.buf, act.q, act.info)


def rmsnorm(out, x, nw):
    v_rmsnorm(out, x, nw.g, nw.info)


def rope(out, x, rt, d, heads):
    v_rope(out, x, rt.tab, rt.info)  # kernels.rope wrote d and heads into info


def softmax(out, x, n):
    v_softmax(out, x, n, _EXP)


def silu(out, x, n):
    v_silu(out, x, n, _SIG)


def mul(out, a, b, n):
    v_mul(out, a, b, n)
