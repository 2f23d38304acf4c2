// q4nat.c: the decode step's kernels in C, as a MicroPython dynamic native module (q4nat.mpy).
//
// Built with MicroPython's natmod tooling (py/dynruntime.mk, tools/mpy_ld.py) for armv6m (the RP2040)
// and x64 (the unix port, where the tests compare it with the plain-Python reference): the same .mpy
// loads on our frozen firmware and on the official download. shared/q4_native.py is its Python face
// (the backend interface of shared/kernels.py); shared/llama.py calls the fused attention and glue
// kernels (shared/llama_fused.py: attention, glue, whole layers) directly. Every function gives the
// integers of the plain-Python reference (shared/q4.py, shared/fixedmath.py, shared/llama.py), bit for bit:
// the bounds that keep each intermediate inside 32 bits are proved there and in docs/KERNELS.md, and the
// products the reference splits to stay below 2**31 (mulshift, mul) are split the same way here.
//
// Arguments are arrays (buffer protocol): int32 vectors and info words, uint8/int8 bytes, int16 tables,
// weights read-only (in flash where the model is in ROMFS). Shapes are checked by shared/kernels.py and
// llama.Model before they get here (a native kernel trusts its caller, as the viper ones do). Nothing here
// allocates. docs/BOARDS.md ("The decode step in C") has the measurements that chose what is here.
#include "py/dynruntime.h"

#define LIM (0x3FFFFFFF)
#define HDR (8)           // q4.I_HDR: act.info's per-group exponents start here, then the group sums
#define EXP_A (192)       // fixedmath.EXP_A
#define EXP_B (384)       // fixedmath.EXP_B
#define EXP_END (0x180000)
#define XBIAS (64)        // llama._XBIAS: packed int8 scales are ((x + 64) << 15) | m

typedef int32_t i32;
typedef uint32_t u32;

static inline void *wbuf(mp_obj_t o) {
    mp_buffer_info_t b;
    mp_get_buffer_raise(o, &b, MP_BUFFER_RW);
    return b.buf;
}

static inline const void *rbuf(mp_obj_t o) {
    mp_buffer_info_t b;
    mp_get_buffer_raise(o, &b, MP_BUFFER_READ);
    return b.buf;
}

static inline i32 clamp(i32 v) {
    return v > LIM ? LIM : (v < -LIM ? -LIM : v);
}

// q4.mulshift: a * f * 2**-s rounded half away from zero, saturated to +-LIM (|f| <= 2**15). The product
// is split as in the reference (a = hi * 2**15 + lo: both partial products below 2**30), which keeps it in
// 32-bit arithmetic: the Cortex-M0+ has a one-cycle 32-bit multiply and no 64-bit one.
static i32 mulshift(i32 a, i32 f, i32 s) {
    int neg = (a < 0) != (f < 0);
    a = clamp(a);  // first: -(-2**31) does not fit
    if (a < 0) {
        a = -a;
    }
    if (f < 0) {
        f = -f;
    }
    i32 u = (a >> 15) * f;
    i32 v = (a & 32767) * f;
    i32 q;
    if (s >= 15) {
        if (s > 45) {
            q = 0;
        } else if (s == 15) {
            q = u + ((v + 16384) >> 15);
        } else {
            q = (u + (v >> 15) + (1 << (s - 16))) >> (s - 15);
        }
    } else if (s > 0) {
        if (u > (LIM >> (15 - s))) {
            q = LIM;
        } else {
            q = (u << (15 - s)) + ((v + (1 << (s - 1))) >> s);
        }
    } else if (u >= 32768 || -s > 30) {
        q = (u || v) ? LIM : 0;
    } else {
        q = (u << 15) + v;
        q = q > (LIM >> -s) ? LIM : q << -s;
    }
    if (q > LIM) {
        q = LIM;
    }
    return neg ? -q : q;
}

// q4.shift_sat: v * 2**sh rounded (half up) for sh < 0, saturated for sh >= 0 (|v| <= 2**30).
static inline i32 shift_sat(i32 v, i32 sh) {
    if (sh >= 0) {
        i32 m = sh <= 30 ? LIM >> sh : 0;
        if (v > m) {
            return LIM;
        }
        if (v < -m) {
            return -LIM;
        }
        return (i32)((u32)v << sh);
    }
    sh = -sh;
    if (sh > 30) {
        return 0;
    }
    return (v + (1 << (sh - 1))) >> sh;
}

static inline int bitlen(u32 v) {
    int n = 0;
    while (v) {
        v >>= 1;
        n++;
    }
    return n;
}

// ---- the INT4 activations and matrix-vector product (shared/q4.py) ----

// quantize_act(x, q, info): Q16 x -> uint8 (q + 128) in groups of 32 with per-group power-of-two
// exponents and sums in info (q4.quantize_act).
static void quantize_core(const i32 *x, uint8_t *q, i32 *pi) {
    i32 ng = pi[6];
    i32 h = pi[7];
    i32 emax = 0;
    for (i32 g = 0; g < ng; g++) {
        const i32 *xg = x + g * 32;
        i32 amax = 0;
        for (int i = 0; i < 32; i++) {
            i32 v = clamp(xg[i]);
            if (v < 0) {
                v = -v;
            }
            if (v > amax) {
                amax = v;
            }
        }
        i32 e = 0;
        while (((amax + ((1 << e) >> 1)) >> e) > 127) {
            e++;
        }
        i32 half = (1 << e) >> 1;
        i32 s = 0;
        uint8_t *qg = q + g * 32;
        for (int i = 0; i < 32; i++) {
            i32 v = (clamp(xg[i]) + half) >> e;
            qg[i] = (uint8_t)(v + 128);
            s += v;
        }
        pi[HDR + g] = e;
        pi[HDR + ng + g] = s;
        if (e > emax) {
            emax = e;
        }
    }
    for (i32 g = 0; g < ng; g++) {
        pi[HDR + g] = emax - pi[HDR + g] + h;
    }
    pi[5] = emax + h;
}

static mp_obj_t quantize_act(mp_obj_t x_in, mp_obj_t q_in, mp_obj_t info_in) {
    quantize_core(rbuf(x_in), wbuf(q_in), wbuf(info_in));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(quantize_act_obj, quantize_act);

// One group: 16 weight bytes (nibbles n = q_w + 8) times 32 activation bytes (u = q_a + 128), both
// unsigned: sum(n * u) fits 16 * 2 * 15 * 255 < 2**18. The signed product is recovered by the caller
// from the nibble sum and the group's activation sum.
static inline i32 group_nu(const uint8_t *w, const uint8_t *a, i32 *nsum) {
    u32 acc = 0;
    u32 ns = 0;
    for (int k = 0; k < 16; k += 4) {
        u32 b0 = w[k], b1 = w[k + 1], b2 = w[k + 2], b3 = w[k + 3];
        acc += (b0 & 15) * a[0] + (b0 >> 4) * a[1] + (b1 & 15) * a[2] + (b1 >> 4) * a[3]
            + (b2 & 15) * a[4] + (b2 >> 4) * a[5] + (b3 & 15) * a[6] + (b3 >> 4) * a[7];
        u32 v = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
        ns += (v & 0x0F0F0F0F) + ((v >> 4) & 0x0F0F0F0F);
        a += 8;
    }
    *nsum = (i32)((ns & 255) + ((ns >> 8) & 255) + ((ns >> 16) & 255) + (ns >> 24));
    return (i32)acc;
}

// Rows r and r + 1 of one group at once: a weight byte of each row goes into one of a word's two 16-bit
// lanes, so each multiply by an activation byte gives both rows' products, and one add both rows' nibble
// sums. A lane holds 16 products of at most 15 * 255 (61,200 < 2**16): the lanes are split into the two
// rows' sums every 8 weight bytes (half8), the nibble sums (at most 240 a lane) with them.
// half8() on the Cortex-M0+ is Thumb-1 assembly: 19 cycles for 4 multiply-accumulates and their nibble
// sums (GCC's own schedule of the C spilled to the stack and reloaded the mask from the literal pool, 13
// cycles a multiply-accumulate); elsewhere (x64: the unix port's tests) the same arithmetic in C.
#if defined(__thumb__) && !defined(__thumb2__)
static inline u32 half8(const uint8_t *wa, const uint8_t *wb, const uint8_t *a, u32 *nsum) {
    u32 p = 0, t, u, v, n = 0;
    __asm__ volatile (
        ".syntax unified\n\t"  // GCC hands inline assembly to the assembler in divided syntax on Thumb-1
        "ldrb %[t], [%[wa], #0]\n\t" "ldrb %[u], [%[wb], #0]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #0]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #1]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #1]\n\t" "ldrb %[u], [%[wb], #1]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #2]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #3]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #2]\n\t" "ldrb %[u], [%[wb], #2]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #4]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #5]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #3]\n\t" "ldrb %[u], [%[wb], #3]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #6]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #7]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #4]\n\t" "ldrb %[u], [%[wb], #4]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #8]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #9]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #5]\n\t" "ldrb %[u], [%[wb], #5]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #10]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #11]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #6]\n\t" "ldrb %[u], [%[wb], #6]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #12]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #13]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        "ldrb %[t], [%[wa], #7]\n\t" "ldrb %[u], [%[wb], #7]\n\t" "lsls %[u], %[u], #16\n\t"
        "orrs %[t], %[t], %[u]\n\t" "lsrs %[u], %[t], #4\n\t" "ands %[u], %[u], %[m]\n\t" "ands %[t], %[t], %[m]\n\t"
        "add %[n], %[t]\n\t" "add %[n], %[u]\n\t"
        "ldrb %[v], [%[a], #14]\n\t" "muls %[t], %[v], %[t]\n\t" "adds %[p], %[p], %[t]\n\t"
        "ldrb %[v], [%[a], #15]\n\t" "muls %[u], %[v], %[u]\n\t" "adds %[p], %[p], %[u]\n\t"
        : [p] "+l" (p), [t] "=&l" (t), [u] "=&l" (u), [v] "=&l" (v), [n] "+h" (n)
        : [wa] "l" (wa), [wb] "l" (wb), [a] "l" (a), [m] "l" (0x000F000Fu)
        : "cc", "memory");
    *nsum = n;
    return p;
}
#else
static inline u32 half8(const uint8_t *wa, const uint8_t *wb, const uint8_t *a, u32 *nsum) {
    u32 p = 0, n = 0;
    for (int k = 0; k < 8; k++) {
        u32 t = wa[k] | ((u32)wb[k] << 16);
        u32 lo = t & 0x000F000F, hi = (t >> 4) & 0x000F000F;
        n += lo + hi;
        p += lo * a[2 * k] + hi * a[2 * k + 1];
    }
    *nsum = n;
    return p;
}
#endif

// The raw sums of one group for rows a and b: sum(nibble * u) and the nibble sums.
static inline void group_nu2(const uint8_t *wa, const uint8_t *wb, const uint8_t *a, i32 *s0, i32 *s1, i32 *n0,
    i32 *n1) {
    u32 na, nb;
    u32 p = half8(wa, wb, a, &na);
    u32 q = half8(wa + 8, wb + 8, a + 16, &nb);
    *s0 = (i32)((p & 0xFFFF) + (q & 0xFFFF));
    *s1 = (i32)((p >> 16) + (q >> 16));
    *n0 = (i32)((na & 0xFFFF) + (nb & 0xFFFF));
    *n1 = (i32)((na >> 16) + (nb >> 16));
}

// One group's contribution to a row's sum (q4.matvec): the signed product from the unsigned one, scaled.
static inline i32 group_term(i32 acc, i32 ns, i32 asum, i32 s, i32 ws, const int16_t *mn, i32 g) {
    acc -= (ns << 7) + (asum << 3);
    if (s > 30) {
        return 0;
    }
    i32 v = acc * ws;
    if (mn) {
        v += asum * (i32)mn[g];
    }
    return (v + ((1 << s) >> 1)) >> s;
}

// matvec(out, buf, scales, mins, q, info): out[r - r0] = row r . act (q4.matvec), kinds 0 (symmetric,
// mins None) and 1 (asymmetric: int16 mins). info as kernels.matvec wrote it: r0, r1, cols, wshift.
static void matvec_core(i32 *out, const uint8_t *w, const uint16_t *sc, const int16_t *mn, const uint8_t *q,
    const i32 *pi) {
    i32 r0 = pi[0], r1 = pi[1], half = pi[2] >> 1, ng = pi[6];
    i32 sh = pi[5] - pi[3];
    const i32 *ex = pi + HDR;
    const i32 *as = pi + HDR + ng;
    i32 r = r0;
    for (; r + 1 < r1; r += 2) {
        const uint8_t *wa = w + r * half;
        const uint8_t *wb = wa + half;
        const uint16_t *sa = sc + r * ng;
        const uint16_t *sb = sa + ng;
        const int16_t *ma = mn ? mn + r * ng : NULL;
        const int16_t *mb = mn ? ma + ng : NULL;
        i32 t0 = 0, t1 = 0;
        for (i32 g = 0; g < ng; g++) {
            i32 acc0, acc1, ns0, ns1;
            group_nu2(wa + 16 * g, wb + 16 * g, q + 32 * g, &acc0, &acc1, &ns0, &ns1);
            t0 += group_term(acc0, ns0, as[g], ex[g], sa[g], ma, g);
            t1 += group_term(acc1, ns1, as[g], ex[g], sb[g], mb, g);
        }
        out[r - r0] = shift_sat(t0, sh);
        out[r + 1 - r0] = shift_sat(t1, sh);
    }
    if (r < r1) {  // an odd row out
        const uint8_t *wr = w + r * half;
        const uint16_t *sr = sc + r * ng;
        const int16_t *mr = mn ? mn + r * ng : NULL;
        i32 t = 0;
        for (i32 g = 0; g < ng; g++) {
            i32 ns;
            i32 acc = group_nu(wr + 16 * g, q + 32 * g, &ns);
            t += group_term(acc, ns, as[g], ex[g], sr[g], mr, g);
        }
        out[r - r0] = shift_sat(t, sh);
    }
}

static mp_obj_t matvec(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    matvec_core(wbuf(args[0]), rbuf(args[1]), rbuf(args[2]), args[3] == mp_const_none ? NULL : rbuf(args[3]),
        rbuf(args[4]), rbuf(args[5]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(matvec_obj, 6, 6, matvec);

// ---- fixedmath's kernels ----

// rmsnorm(out, x, gain, info): fixedmath.rmsnorm (info: n, gain shift, eps Q32, ceil(log2 n), kmin).
static void rmsnorm_core(i32 *out, const i32 *x, const int16_t *gain, const i32 *pi) {
    i32 n = pi[0], gs = pi[1], m = pi[3], kmin = pi[4];
    i32 amax = 0;
    for (i32 i = 0; i < n; i++) {
        i32 v = clamp(x[i]);
        if (v < 0) {
            v = -v;
        }
        if (v > amax) {
            amax = v;
        }
    }
    i32 k = bitlen((u32)amax) - 15;
    if (k < kmin) {
        k = kmin;
    }
    i32 hm = (1 << m) >> 1;
    i32 ss = 0;
    for (i32 i = 0; i < n; i++) {
        i32 v = clamp(x[i]);
        if (v < 0) {
            v = -v;
        }
        v = k >= 0 ? v >> k : v << -k;
        ss += (v * v + hm) >> m;
    }
    i32 q1 = ss / n;
    i32 mean = (q1 << m) + (((ss - q1 * n) << m) / n);
    if (k >= 0) {
        if (2 * k < 31) {
            mean += pi[2] >> (2 * k);
        }
    } else {
        mean += pi[2] << (-2 * k);
    }
    if (mean == 0) {
        for (i32 i = 0; i < n; i++) {
            out[i] = 0;
        }
        return;
    }
    i32 j = 0;
    if (mean > LIM) {
        mean >>= 2;
        j = -1;
    } else {
        while (mean < 0x10000000) {
            mean <<= 2;
            j++;
        }
    }
    i32 s = 0;
    for (i32 b = 0x10000000; b; b >>= 2) {
        if (mean >= s + b) {
            mean -= s + b;
            s = (s >> 1) + b;
        } else {
            s >>= 1;
        }
    }
    i32 r = (0x20000000 + (s >> 1)) / s;
    i32 s1 = k + 6 - j;
    i32 s2 = 7 + gs;
    for (i32 i = 0; i < n; i++) {
        out[i] = mulshift(mulshift(x[i], r, s1), gain[i], s2);
    }
}

static mp_obj_t rmsnorm(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    rmsnorm_core(wbuf(args[0]), rbuf(args[1]), rbuf(args[2]), rbuf(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(rmsnorm_obj, 4, 4, rmsnorm);

// One rotated pair (fixedmath.rope): exact floor((a*c - b*s + 2**14) / 2**15), saturated.
static inline void rot(i32 a, i32 b, i32 c, i32 s, i32 *ya, i32 *yb) {
    a = clamp(a);
    b = clamp(b);
    i32 ah = a >> 15, al = a & 32767, bh = b >> 15, bl = b & 32767;
    *ya = clamp(ah * c - bh * s + ((al * c - bl * s + 16384) >> 15));
    *yb = clamp(ah * s + bh * c + ((al * s + bl * c + 16384) >> 15));
}

// rope(out, x, tab, info): rotate info[3] heads of x by table row info[2] (info: head_dim, style, d, heads).
static mp_obj_t rope(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    i32 *out = wbuf(args[0]);
    const i32 *x = rbuf(args[1]);
    const int16_t *tab = rbuf(args[2]);
    const i32 *pi = rbuf(args[3]);
    i32 hd = pi[0], half = hd >> 1, style = pi[1], heads = pi[3];
    const int16_t *row = tab + pi[2] * hd;
    for (i32 h = 0; h < heads; h++) {
        i32 o = h * hd;
        for (i32 i = 0; i < half; i++) {
            i32 ia = style ? o + i : o + 2 * i;
            i32 ib = style ? ia + half : ia + 1;
            i32 ya, yb;
            rot(x[ia], x[ib], row[i], row[half + i], &ya, &yb);
            out[ia] = ya;
            out[ib] = yb;
        }
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(rope_obj, 4, 4, rope);

static void softmax_n(i32 *out, const i32 *x, i32 n, const uint16_t *t) {
    i32 mx = -LIM;
    for (i32 i = 0; i < n; i++) {
        i32 v = clamp(x[i]);
        if (v > mx) {
            mx = v;
        }
    }
    i32 hi = 0, lo = 0;
    for (i32 i = 0; i < n; i++) {
        i32 d = mx - clamp(x[i]);
        i32 e = 0;
        if (d < EXP_END) {
            i32 a = d >> 13;
            e = (i32)t[a] * t[EXP_B + ((d >> 7) & 63)];
            e -= ((e >> 8) * (d & 127)) >> 8;
            i32 sh = t[EXP_A + a];
            e = sh > 30 ? 0 : (e + ((1 << sh) >> 1)) >> sh;
        }
        out[i] = e;
        hi += e >> 15;
        lo += e & 32767;
    }
    i32 s1 = hi + (lo >> 15);
    i32 k = 0;
    while ((s1 >> k) >= 65536) {
        k++;
    }
    i32 sm = (s1 + ((1 << k) >> 1)) >> k;
    i32 r = (LIM + (sm >> 1) + 1) / sm;
    i32 sh = 14 + k;
    i32 rnd = 1 << (sh - 1);
    for (i32 i = 0; i < n; i++) {
        out[i] = (((out[i] + 16384) >> 15) * r + rnd) >> sh;
    }
}

// softmax(out, x, n, tab): fixedmath.softmax with its EXP_TAB.
static mp_obj_t softmax(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    softmax_n(wbuf(args[0]), rbuf(args[1]), mp_obj_get_int(args[2]), rbuf(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(softmax_obj, 4, 4, softmax);

// silu(out, x, n, tab): fixedmath.silu with its SIG_TAB.
static void silu_core(i32 *out, const i32 *x, i32 n, const uint16_t *t) {
    for (i32 i = 0; i < n; i++) {
        i32 v = clamp(x[i]);
        i32 a = v < 0 ? -v : v;
        i32 y;
        if (a >= 0x100000) {
            y = v > 0 ? v : 0;
        } else {
            i32 k = a >> 11;
            i32 c = t[k];
            c -= ((c - (i32)t[k + 1]) * (a & 2047) + 1024) >> 11;
            i32 mm = (i32)(((u32)a * (u32)c + 32768u) >> 16);
            y = v >= 0 ? v - mm : -mm;
        }
        out[i] = y;
    }
}

static mp_obj_t silu(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    silu_core(wbuf(args[0]), rbuf(args[1]), mp_obj_get_int(args[2]), rbuf(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(silu_obj, 4, 4, silu);

// fixedmath.mul's one product, in 32-bit partial products as there.
static inline i32 mul1(i32 x, i32 y) {
    x = clamp(x);
    y = clamp(y);
    int neg = (x < 0) != (y < 0);
    if (x < 0) {
        x = -x;
    }
    if (y < 0) {
        y = -y;
    }
    i32 xh = x >> 15, xl = x & 32767, yh = y >> 15, yl = y & 32767;
    i32 q = xh * yh;
    if (q >= 65536) {
        q = LIM;
    } else {
        i32 c = xh * yl + xl * yh;
        q <<= 14;
        if (q > LIM - (c >> 1)) {
            q = LIM;
        } else {
            q += (c >> 1) + (i32)(((u32)((c & 1) << 15) + (u32)(xl * yl) + 32768u) >> 16);
            if (q > LIM) {
                q = LIM;
            }
        }
    }
    return neg ? -q : q;
}

// mul(out, a, b, n): fixedmath.mul, round(a * b / 2**16) half away from zero, saturated.
static void mul_core(i32 *out, const i32 *a, const i32 *b, i32 n) {
    for (i32 i = 0; i < n; i++) {
        out[i] = mul1(a[i], b[i]);
    }
}

static mp_obj_t mul(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mul_core(wbuf(args[0]), rbuf(args[1]), rbuf(args[2]), mp_obj_get_int(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(mul_obj, 4, 4, mul);

// dot_i8(a, b, info) and axpy_i8(out, b, info): fixedmath's attention loops (info: ao, bo, n, u).
static mp_obj_t dot_i8(mp_obj_t a_in, mp_obj_t b_in, mp_obj_t info_in) {
    const i32 *a = rbuf(a_in);
    const int8_t *b = rbuf(b_in);
    const i32 *pi = rbuf(info_in);
    a += pi[0];
    b += pi[1];
    i32 d = 0;
    for (i32 i = 0; i < pi[2]; i++) {
        d += a[i] * b[i];
    }
    return mp_obj_new_int(d);
}
static MP_DEFINE_CONST_FUN_OBJ_3(dot_i8_obj, dot_i8);

static mp_obj_t axpy_i8(mp_obj_t o_in, mp_obj_t b_in, mp_obj_t info_in) {
    i32 *o = wbuf(o_in);
    const int8_t *b = rbuf(b_in);
    const i32 *pi = rbuf(info_in);
    o += pi[0];
    b += pi[1];
    i32 u = pi[3];
    for (i32 i = 0; i < pi[2]; i++) {
        o[i] = (i32)((u32)o[i] + (u32)(u * b[i]));
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(axpy_i8_obj, axpy_i8);

// ---- shared/llama.py's glue, per element there ----

// add(x, y, n): x += y saturated to +-LIM (llama._add).
static void add_core(i32 *x, const i32 *y, i32 n) {
    for (i32 i = 0; i < n; i++) {
        i32 a = x[i], b = y[i];
        if (a >= 0) {
            a = b > LIM - a ? LIM : a + b;
        } else {
            a = b < -LIM - a ? -LIM : a + b;
        }
        x[i] = a;
    }
}

static mp_obj_t add(mp_obj_t x_in, mp_obj_t y_in, mp_obj_t n_in) {
    add_core(wbuf(x_in), rbuf(y_in), mp_obj_get_int(n_in));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(add_obj, add);

static inline i32 ceil127(i32 amax, i32 x) {
    if (x >= 0) {
        i32 d = 127 << x;
        return (amax + d - 1) / d;
    }
    return ((amax << -x) + 126) / 127;
}

// llama._quant8: src[0:n] (Q16) -> int8 q << lsh into dst (int32 or int8 elements, by dsz); returns
// the packed scale ((x + 64) << 15) | m, 0 for a zero vector.
static i32 quant8(const i32 *src, i32 n, void *dst, int dsz, i32 lsh) {
    i32 amax = 0;
    for (i32 i = 0; i < n; i++) {
        i32 v = clamp(src[i]);
        v = v < 0 ? -v : v;
        if (v > amax) {
            amax = v;
        }
    }
    if (amax > LIM) {
        amax = LIM;
    }
    if (amax == 0) {
        for (i32 i = 0; i < n; i++) {
            if (dsz == 4) {
                ((i32 *)dst)[i] = 0;
            } else {
                ((int8_t *)dst)[i] = 0;
            }
        }
        return 0;
    }
    i32 x = bitlen((u32)amax) - 22;
    i32 m = ceil127(amax, x);
    if (m > 32767) {
        x++;
        m = ceil127(amax, x);
    }
    i32 r = ((1 << 28) + (m >> 1)) / m;
    i32 s = 28 + x;
    for (i32 i = 0; i < n; i++) {
        i32 q = mulshift(src[i], r, s);
        q = q > 127 ? 127 : (q < -127 ? -127 : q);
        if (dsz == 4) {
            ((i32 *)dst)[i] = q << lsh;
        } else {
            ((int8_t *)dst)[i] = (int8_t)q;
        }
    }
    return ((x + XBIAS) << 15) | m;
}

// store(src, dst, scales, info): K or V of this token -> int8 rows and packed scales
// (llama.Model._store; info: head_dim, kv heads, row r = layer * slots + slot, kv_dim).
static void store_core(const i32 *src, int8_t *dst, i32 *scales, const i32 *pi) {
    i32 hd = pi[0], nkv = pi[1], r = pi[2], kvd = pi[3];
    for (i32 h = 0; h < nkv; h++) {
        scales[r * nkv + h] = quant8(src + h * hd, hd, dst + r * kvd + h * hd, 1, 0);
    }
}

static mp_obj_t store(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    store_core(rbuf(args[0]), wbuf(args[1]), wbuf(args[2]), rbuf(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(store_obj, 4, 4, store);

// query(q, qgrp, qf_qsh, info): each query head -> int8 << qshift in its KV head's group buffer, its
// score factor and shift (llama.Model._query; info: head_dim, group, kv heads, qshift, isq_m, isq_s).
// qgrp: the tuple of the KV heads' group buffers; qf_qsh: (qf, qsh).
static void query_core(const i32 *q, mp_obj_t qgrp, mp_obj_t qfs, const i32 *pi) {
    size_t nq;
    mp_obj_t *qg;
    mp_obj_get_array(qgrp, &nq, &qg);
    size_t nf;
    mp_obj_t *fs;
    mp_obj_get_array(qfs, &nf, &fs);
    i32 *qf = wbuf(fs[0]);
    i32 *qsh = wbuf(fs[1]);
    i32 hd = pi[0], g = pi[1], nkv = pi[2], qs = pi[3], isq_m = pi[4], isq_s = pi[5];
    for (i32 h = 0; h < nkv && h < (i32)nq; h++) {
        i32 *dst = wbuf(qg[h]);
        for (i32 a = 0; a < g; a++) {
            i32 hq = h * g + a;
            i32 sc = quant8(q + hq * hd, hd, dst + a * hd, 4, qs);
            qf[hq] = ((sc & 32767) * isq_m + 16384) >> 15;
            qsh[hq] = qs + isq_s - 14 - ((sc >> 15) - XBIAS);
        }
    }
}

static mp_obj_t query(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    query_core(rbuf(args[0]), args[1], args[2], rbuf(args[3]));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(query_obj, 4, 4, query);

// scores(bufs, kslot, info): for every KV head h, query head a of its group and key j < n:
// scores[h * g + a][j] = (q rotated by the distance n - 1 - j) . k_j scaled (llama.Model._scores).
// bufs: (qgrp tuple, k int8, kscale, rope table, qf, qsh, scores tuple);
// info: n keys, row base (layer * slots), head_dim, group, kv heads, kv_dim, rope style.
static void scores_core(mp_obj_t bufs_in, const i32 *kslot, const i32 *pi) {
    size_t nb;
    mp_obj_t *b;
    mp_obj_get_array(bufs_in, &nb, &b);
    size_t nq, ns;
    mp_obj_t *qg, *sc;
    mp_obj_get_array(b[0], &nq, &qg);
    const int8_t *kk = rbuf(b[1]);
    const i32 *ks = rbuf(b[2]);
    const int16_t *tab = rbuf(b[3]);
    const i32 *qf = rbuf(b[4]);
    const i32 *qsh = rbuf(b[5]);
    mp_obj_get_array(b[6], &ns, &sc);
    i32 n = pi[0], base = pi[1], hd = pi[2], g = pi[3], nkv = pi[4], kvd = pi[5], style = pi[6];
    i32 half = hd >> 1;
    for (i32 h = 0; h < nkv; h++) {
        const i32 *qgh = rbuf(qg[h]);
        for (i32 a = 0; a < g; a++) {
            i32 hq = h * g + a;
            i32 *out = wbuf(sc[hq]);
            const i32 *qa = qgh + a * hd;
            for (i32 j = 0; j < n; j++) {
                i32 slot = base + kslot[j];
                const int16_t *row = tab + (n - 1 - j) * hd;
                const int8_t *k = kk + slot * kvd + h * hd;
                i32 d = 0;
                for (i32 i = 0; i < half; i++) {
                    i32 ia = style ? i : 2 * i;
                    i32 ib = style ? ia + half : ia + 1;
                    i32 ya, yb;
                    rot(qa[ia], qa[ib], row[i], row[half + i], &ya, &yb);
                    d += ya * k[ia] + yb * k[ib];
                }
                i32 s = ks[slot * nkv + h];
                i32 mk = s & 32767;
                i32 xk = (s >> 15) - XBIAS;
                out[j] = mulshift(d, (mk * qf[hq] + 16384) >> 15, qsh[hq] - xk);
            }
        }
    }
}

static mp_obj_t scores(mp_obj_t bufs_in, mp_obj_t kslot_in, mp_obj_t info_in) {
    scores_core(bufs_in, rbuf(kslot_in), rbuf(info_in));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(scores_obj, scores);

// mix(bufs, kslot, info): att[head] = softmax(scores[head]) . V (llama.Model._mix).
// bufs: (scores tuple, v int8, vscale, att, EXP_TAB); info as scores'.
static void mix_core(mp_obj_t bufs_in, const i32 *kslot, const i32 *pi) {
    size_t nb;
    mp_obj_t *b;
    mp_obj_get_array(bufs_in, &nb, &b);
    size_t ns;
    mp_obj_t *sc;
    mp_obj_get_array(b[0], &ns, &sc);
    const int8_t *vv = rbuf(b[1]);
    const i32 *vs = rbuf(b[2]);
    i32 *att = wbuf(b[3]);
    const uint16_t *et = rbuf(b[4]);
    i32 n = pi[0], base = pi[1], hd = pi[2], g = pi[3], nkv = pi[4], kvd = pi[5];
    for (i32 h = 0; h < nkv; h++) {
        i32 big = -XBIAS;
        for (i32 j = 0; j < n; j++) {
            i32 s = vs[(base + kslot[j]) * nkv + h];
            if (s && (s >> 15) - XBIAS > big) {
                big = (s >> 15) - XBIAS;
            }
        }
        for (i32 a = 0; a < g; a++) {
            i32 hq = h * g + a;
            i32 *p = wbuf(sc[hq]);
            softmax_n(p, p, n, et);
            i32 *o = att + hq * hd;
            for (i32 i = 0; i < hd; i++) {
                o[i] = 0;
            }
            for (i32 j = 0; j < n; j++) {
                i32 slot = base + kslot[j];
                i32 s = vs[slot * nkv + h];
                if (s == 0) {
                    continue;
                }
                i32 u = mulshift(p[j], s & 32767, 9 + big - ((s >> 15) - XBIAS));
                if (u == 0) {
                    continue;
                }
                const int8_t *v = vv + slot * kvd + h * hd;
                for (i32 i = 0; i < hd; i++) {
                    o[i] = (i32)((u32)o[i] + (u32)(u * v[i]));
                }
            }
            for (i32 i = 0; i < hd; i++) {
                o[i] = shift_sat(o[i], big - 7);
            }
        }
    }
}

static mp_obj_t mix(mp_obj_t bufs_in, mp_obj_t kslot_in, mp_obj_t info_in) {
    mix_core(bufs_in, rbuf(kslot_in), rbuf(info_in));
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_3(mix_obj, mix);

// ---- one whole layer ----

// A layer matrix as _Fused hands it over: (nibbles, scales, mins or None, wshift, rows).
typedef struct {
    const uint8_t *w;
    const uint16_t *sc;
    const int16_t *mn;
    i32 wshift;
    i32 rows;
} mat_t;

static void get_mat(mp_obj_t o, mat_t *m) {
    size_t n;
    mp_obj_t *it;
    mp_obj_get_array(o, &n, &it);
    m->w = rbuf(it[0]);
    m->sc = rbuf(it[1]);
    m->mn = it[2] == mp_const_none ? NULL : rbuf(it[2]);
    m->wshift = mp_obj_get_int(it[3]);
    m->rows = mp_obj_get_int(it[4]);
}

// kernels.matvec over all rows: r0, r1 and the matrix's shift into the activation's info, then the product
static void mv(i32 *out, mp_obj_t mat, const uint8_t *q, i32 *info) {
    mat_t m;
    get_mat(mat, &m);
    info[0] = 0;
    info[1] = m.rows;
    info[3] = m.wshift;
    matvec_core(out, m.w, m.sc, m.mn, q, info);
}

// layer(bufs): llama.Model._attention_block then _ffn_block for one layer whose matrices are INT4 (q4 or q4a),
// resident or read in place, without biases: one call instead of some forty kernel and method calls from
// bytecode (each costs tens of microseconds on the RP2040). The caller wrote the store row (sinfo[2]), the
// number of keys and the layer's row base (ainfo[0], ainfo[1]). bufs (shared/llama.py _Fused.layer_bufs):
// 0-6 x, xb, q, kvb, att, hb, hb2; 7-10 attention norm gains and info, FFN norm gains and info;
// 11-16 act_d, act_q, act_h (q bytes, info); 17-23 wq, wk, wv, wo, w1, w3, w2 (mat_t tuples);
// 24-27 k, kscale, v, vscale; 28 qgrp; 29 (qf, qsh); 30 qinfo; 31 sinfo; 32 scores' bufs; 33 mix's bufs;
// 34 ainfo; 35 SIG_TAB; 36 kslot; 37 dims (dim, hidden).
static mp_obj_t layer(mp_obj_t bufs_in) {
    size_t nb;
    mp_obj_t *b;
    mp_obj_get_array(bufs_in, &nb, &b);
    i32 *x = wbuf(b[0]), *xb = wbuf(b[1]), *q = wbuf(b[2]), *kvb = wbuf(b[3]), *att = wbuf(b[4]);
    i32 *hb = wbuf(b[5]), *hb2 = wbuf(b[6]);
    uint8_t *dq = wbuf(b[11]), *qq = wbuf(b[13]), *hq = wbuf(b[15]);
    i32 *di = wbuf(b[12]), *qi = wbuf(b[14]), *hi = wbuf(b[16]);
    const i32 *sinfo = rbuf(b[31]), *ainfo = rbuf(b[34]), *kslot = rbuf(b[36]), *dims = rbuf(b[37]);
    i32 dim = dims[0], hidden = dims[1];
    rmsnorm_core(xb, x, rbuf(b[7]), rbuf(b[8]));
    quantize_core(xb, dq, di);
    mv(q, b[17], dq, di);
    mv(kvb, b[18], dq, di);
    store_core(kvb, wbuf(b[24]), wbuf(b[25]), sinfo);
    mv(kvb, b[19], dq, di);
    store_core(kvb, wbuf(b[26]), wbuf(b[27]), sinfo);
    query_core(q, b[28], b[29], rbuf(b[30]));
    scores_core(b[32], kslot, ainfo);
    mix_core(b[33], kslot, ainfo);
    quantize_core(att, qq, qi);
    mv(xb, b[20], qq, qi);
    add_core(x, xb, dim);
    rmsnorm_core(xb, x, rbuf(b[9]), rbuf(b[10]));
    quantize_core(xb, dq, di);
    mv(hb, b[21], dq, di);
    mv(hb2, b[22], dq, di);
    silu_core(hb, hb, hidden, rbuf(b[35]));
    mul_core(hb, hb, hb2, hidden);
    quantize_core(hb, hq, hi);
    mv(xb, b[23], hq, hi);
    add_core(x, xb, dim);
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(layer_obj, layer);

// embed(out, nibbles, scales, mins, info): one INT4 row of token_embd to Q16, out[c] = shift_sat((q * ws
// + mf), sh) for q = nibble - 8 (model_load.EmbedRows.fill, resident or in place; info: row, groups, sh).
static mp_obj_t embed(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    i32 *out = wbuf(args[0]);
    const uint8_t *w = rbuf(args[1]);
    const uint16_t *sc = rbuf(args[2]);
    const int16_t *mn = args[3] == mp_const_none ? NULL : rbuf(args[3]);
    const i32 *pi = rbuf(args[4]);
    i32 row = pi[0], ng = pi[1], sh = pi[2];
    w += row * ng * 16;
    sc += row * ng;
    if (mn) {
        mn += row * ng;
    }
    for (i32 g = 0; g < ng; g++) {
        i32 ws = sc[g];
        i32 mf = mn ? mn[g] : 0;
        for (int j = 0; j < 16; j++) {
            i32 b = w[j];
            *out++ = shift_sat(((b & 15) - 8) * ws + mf, sh);
            *out++ = shift_sat(((b >> 4) - 8) * ws + mf, sh);
        }
        w += 16;
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(embed_obj, 5, 5, embed);

// positions(kslot, info): the keys of staged token s's query by position (llama.Model._positions over
// RingKV.fill_slots; info: live, capacity, sink, window, head, s); returns their number, the query last.
static mp_obj_t positions(mp_obj_t kslot_in, mp_obj_t info_in) {
    i32 *kslot = wbuf(kslot_in);
    const i32 *pi = rbuf(info_in);
    i32 live = pi[0], cap = pi[1], sink = pi[2], window = pi[3], head = pi[4], st = pi[5];
    i32 nv = live + st;
    i32 e = nv > cap ? nv - cap : 0;
    i32 sp = nv > sink ? sink : nv;
    i32 n = 0;
    for (i32 i = 0; i < nv; i++) {
        if (i < sp || i >= sp + e) {
            i32 slot;
            if (i >= live) {
                slot = cap + i - live;
            } else if (i < sink) {
                slot = i;
            } else {
                slot = sink + (head + i - sink) % window;
            }
            kslot[n++] = slot;
        }
    }
    kslot[n] = cap + st;
    return MP_OBJ_NEW_SMALL_INT(n + 1);
}
static MP_DEFINE_CONST_FUN_OBJ_2(positions_obj, positions);

// argmax(x, n): the index of the largest of x[0..n-1], ties to the lowest (llama.argmax).
static mp_obj_t argmax(mp_obj_t x_in, mp_obj_t n_in) {
    const i32 *x = rbuf(x_in);
    i32 n = mp_obj_get_int(n_in);
    i32 best = 0;
    i32 bv = x[0];
    for (i32 i = 1; i < n; i++) {
        if (x[i] > bv) {
            bv = x[i];
            best = i;
        }
    }
    return MP_OBJ_NEW_SMALL_INT(best);
}
static MP_DEFINE_CONST_FUN_OBJ_2(argmax_obj, argmax);

// copy(dst, src, off, n): dst[off + i] = src[i] for i < n (int32 words; the classifier's blocks).
static mp_obj_t copy(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    i32 *dst = wbuf(args[0]);
    const i32 *src = rbuf(args[1]);
    i32 off = mp_obj_get_int(args[2]);
    i32 n = mp_obj_get_int(args[3]);
    for (i32 i = 0; i < n; i++) {
        dst[off + i] = src[i];
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(copy_obj, 4, 4, copy);

mp_obj_t mpy_init(mp_obj_fun_bc_t *self, size_t n_args, size_t n_kw, mp_obj_t *args) {
    MP_DYNRUNTIME_INIT_ENTRY
    mp_store_global(MP_QSTR_quantize_act, MP_OBJ_FROM_PTR(&quantize_act_obj));
    mp_store_global(MP_QSTR_matvec, MP_OBJ_FROM_PTR(&matvec_obj));
    mp_store_global(MP_QSTR_rmsnorm, MP_OBJ_FROM_PTR(&rmsnorm_obj));
    mp_store_global(MP_QSTR_rope, MP_OBJ_FROM_PTR(&rope_obj));
    mp_store_global(MP_QSTR_softmax, MP_OBJ_FROM_PTR(&softmax_obj));
    mp_store_global(MP_QSTR_silu, MP_OBJ_FROM_PTR(&silu_obj));
    mp_store_global(MP_QSTR_mul, MP_OBJ_FROM_PTR(&mul_obj));
    mp_store_global(MP_QSTR_dot_i8, MP_OBJ_FROM_PTR(&dot_i8_obj));
    mp_store_global(MP_QSTR_axpy_i8, MP_OBJ_FROM_PTR(&axpy_i8_obj));
    mp_store_global(MP_QSTR_add, MP_OBJ_FROM_PTR(&add_obj));
    mp_store_global(MP_QSTR_store, MP_OBJ_FROM_PTR(&store_obj));
    mp_store_global(MP_QSTR_query, MP_OBJ_FROM_PTR(&query_obj));
    mp_store_global(MP_QSTR_scores, MP_OBJ_FROM_PTR(&scores_obj));
    mp_store_global(MP_QSTR_mix, MP_OBJ_FROM_PTR(&mix_obj));
    mp_store_global(MP_QSTR_argmax, MP_OBJ_FROM_PTR(&argmax_obj));
    mp_store_global(MP_QSTR_copy, MP_OBJ_FROM_PTR(&copy_obj));
    mp_store_global(MP_QSTR_layer, MP_OBJ_FROM_PTR(&layer_obj));
    mp_store_global(MP_QSTR_embed, MP_OBJ_FROM_PTR(&embed_obj));
    mp_store_global(MP_QSTR_positions, MP_OBJ_FROM_PTR(&positions_obj));
    MP_DYNRUNTIME_INIT_EXIT
}
