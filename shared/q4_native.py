# q4_native.py: the kernels backend on q4nat, the decode step's C kernels (firmware/natmod/q4nat.c).
"""q4nat.mpy is a MicroPython dynamic native module (tools/board/natmod_build.py builds it for armv6m and
x64; `edgetwin build` puts it into a board's /lib): where it is not on the path, or the interpreter cannot
load native modules (CPython, CircuitPython), importing this module raises ImportError and shared/kernels.py
falls back to the next backend. Same integers as the plain reference, bit for bit (tests/shared).

Besides the kernels of shared/kernels.py, shared/llama.py calls q4nat's glue directly when this backend
is in use (`fused`): K/V storing, query quantising, attention scores and mix over all keys, the residual
add and argmax, so a decode step runs no per-element bytecode. The INT8-weight (Q8) matrices and the raw
group dots have no C version: they go to the viper kernels, or the plain ones where viper is missing.
"""
import q4nat

from shared.fixedmath import EXP_TAB as _EXP, SIG_TAB as _SIG

try:
    from shared import q4_viper as _other
except (SyntaxError, ImportError):
    from shared import q4 as _other

fused = q4nat
_KIND_Q8 = 2


def quantize_act(act, x):
    q4nat.quantize_act(x, act.q, act.info)


def matvec(out, mat, act, r0, r1):
    if mat.kind == _KIND_Q8:
        _other.matvec(out, mat, act, r0, r1)
    else:  # kernels.matvec wrote r0, r1 and wshift into act.info
        q4nat.matvec(out, mat.buf, mat.scales, mat.mins, act.q, act.info)


def group_dots(out, mat, act, row):
    _other.group_dots(out, mat, act, row)


def rmsnorm(out, x, nw):
    q4nat.rmsnorm(out, x, nw.g, nw.info)


def rope(out, x, rt, d, heads):
    q4nat.rope(out, x, rt.tab, rt.info)  # kernels.rope wrote d and heads into info


def softmax(out, x, n):
    q4nat.softmax(out, x, n, _EXP)


def silu(out, x, n):
    q4nat.silu(out, x, n, _SIG)


def mul(out, a, b, n):
    q4nat.mul(out, a, b, n)


dot_i8 = q4nat.dot_i8
axpy_i8 = q4nat.axpy_i8
