"""2^x on the FMA pipe: the constants and a numpy model of the kernel's exact arithmetic.

The MUFU does 16 ex2 per clock per SM; hd64 bf16 and hd128 e4m3 need about that many per
clock to keep the tensor cores fed, so part of each row goes through FFMAs instead (FA4's
Blackwell trick). softmax.exp2_fma traces the same steps; this module holds no DSL, so the
error can be measured on the CPU (tests/test_fa3_exp2_poly.py):

- x <- max(x, -127): masked scores are -inf, and 2^-127 is already below fp32's normal range;
- j = floor(x) from one add rounded down: x + 1.5 * 2^23 leaves floor(x) in the low mantissa
  bits (its ulp is 1), so (bits << 23) is j in the exponent field;
- f = x - j in [0, 1], 2^f by a polynomial p with p(0) = 1 exactly, so p >= 1 and the sum
  below never borrows from the sign bit;
- 2^x = bits(p) + (j << 23) as integers (LEA on the ALU pipe).
"""

from __future__ import annotations

import numpy as np

ROUND_MAGIC = 1.5 * 2.0**23
X_MIN = -127.0
# p(f) = 1 + c1 f + c2 f^2 (+ c3 f^3): minimax in relative error on [0, 1] with p(0) = 1,
# fitted by fit_minimax below and rounded to fp32. Max relative error of the fp32 evaluation:
# degree 2 2.1e-3 (under e4m3's 2^-4 rounding of P), degree 3 8.6e-5 (under bf16's 2^-9).
COEFFS = {
    2: (0.6659702062606812, 0.32991597056388855),
    3: (0.6951163411140442, 0.22764700651168823, 0.07706519961357117),
}


def emulated_column(c: int, eighths: int) -> bool:
    """Whether a row's column c takes exp2_fma: `eighths` of every 8 columns, spread evenly
    (c where floor((c + 1) k / 8) steps), so MUFU and FMA work interleave along the row."""
    return ((c + 1) * eighths) // 8 > (c * eighths) // 8


def fit_minimax(degree: int, points: int = 20001, iters: int = 200) -> np.ndarray:
    """Coefficients c1..c_degree of 1 + sum c_k f^k minimising max |p / 2^f - 1| on [0, 1]
    (Lawson's iteratively reweighted least squares)."""
    f = np.linspace(0.0, 1.0, points)
    y = np.exp2(f)
    a = np.stack([f**k for k in range(1, degree + 1)], 1) / y[:, None]
    b = (y - 1.0) / y
    w = np.full(points, 1.0 / points)
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        w = w * np.abs(a @ c - b)
        w /= w.sum()
    return c


def _fma32(a, b, c):
    # One rounding to fp32 (the float64 product of two fp32 values is exact).
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def exp2_fma_model(x: np.ndarray, degree: int) -> np.ndarray:
    """The kernel's steps on fp32 numpy arrays: max, add.rm, two subs, Horner FFMAs, LEA."""
    x = np.maximum(np.asarray(x, dtype=np.float32), np.float32(X_MIN))
    magic = np.float32(ROUND_MAGIC)
    # add.rm: round toward -inf. ulp(magic) = 1, so the exact sum's floor is the result.
    xr = np.floor(x.astype(np.float64) + ROUND_MAGIC).astype(np.float32)
    j_f = (xr - magic).astype(np.float32)  # exact: an integer below 2^22
    f = (x - j_f).astype(np.float32)
    cs = [np.float32(c) for c in COEFFS[degree]]
    p = np.full_like(f, cs[-1])
    for c in reversed(cs[:-1]):
        p = _fma32(p, f, np.full_like(f, c))
    p = _fma32(p, f, np.ones_like(f))
    bits = p.view(np.uint32).astype(np.uint64) + (xr.view(np.uint32).astype(np.uint64) << np.uint64(23))
    return (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
