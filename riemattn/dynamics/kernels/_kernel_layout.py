"""The run-time layout of a packed field (private; see :mod:`riemattn.dynamics.kernels`).

A packed field is three arrays: ``ints`` (configuration, ``N_INTS`` int64 slots at the indices
below), ``floats`` (data shared by every trajectory) and ``per`` (one row of data per trajectory,
or a single row for all). Every datum that may be shared or per trajectory is addressed by a
*location* (``LOC_FLOATS`` or ``LOC_PER``) and an offset into that array. Slots not used by a
field kind are 0; reserved slots keep their meaning when a kind is added, so packs and kernels
stay compatible (the compiled code reads the slots, it is not specialised on them).

Head-matrix sources (P and U), ``*_KIND``:

- ``SRC_IDENTITY`` (U only): U_eta = I, nothing stored;
- ``SRC_CONST``: ``heads * d * d`` numbers (C order, head-major);
- ``SRC_SCALAR``: one number c, M = c I (one head; GLPR's SA/USA);
- ``SRC_SINES`` (:class:`~riemattn.dynamics.schedules.TimeVaryingHeads`, ``terms`` = K):
  B (heads d d), A (K heads d d), omega (K), phi (K);
- ``SRC_STEPS`` (:class:`~riemattn.dynamics.schedules.PiecewiseConstantHeads`, ``terms`` = m):
  times (m), stacks (m heads d d);
- ``SRC_ROWSINES`` (a row-separable ``TimeVaryingHeads``: each A_k nonzero on one row of one
  head, no two terms on the same row -- M_eta(t) = B_eta + D_eta(t) P'_eta, D diagonal, the
  hemisphere ensemble's heads; packed so where it reads fewer numbers; ``terms`` = 1 when B is
  stored, 0 when all its entries are +0.0 and it is not): [B (heads d d)], omega (heads d), phi
  (heads d), P' (heads d d): row r of head eta has the sine and the row of A_k of its term k (0
  without one). The same values as ``SRC_SINES`` (``_kernel_heads.heads_at``).
"""

from __future__ import annotations

# --- ints slots ---------------------------------------------------------------------------
KIND = 0  # KIND_ATTENTION, KIND_CIRCLE
MANIFOLD = 1  # MAN_SPHERE, MAN_ELLIPSOID, MAN_FLAT
L = 2  # tokens
D = 3  # dimension of a token
H = 4  # heads of the field (max of P's and U's heads)
MASK = 5  # MASK_FULL, MASK_CAUSAL
NORM = 6  # NORM_PAPER, NORM_SOFTMAX, NORM_MEAN
RESCALED = 7  # 1: rescaled "mean" scores beta (y_i^T P y_j - 1) / the rescaled USA circle form
PLACEMENT = 8  # layer-norm placement: PL_POST (the attention field itself), PL_PRE, PL_PERI, PL_NGPT, PL_MIX
BETA_LOC = 9
BETA_OFF = 10
P_KIND = 11
P_LOC = 12
P_OFF = 13
P_HEADS = 14
P_TERMS = 15
U_KIND = 16
U_LOC = 17
U_OFF = 18
U_HEADS = 19
U_TERMS = 20
W_OFF = 21  # offset of W (d, d) in floats (ellipsoid: of the state, or of the directions of a
#             flat-state placement), -1 otherwise (W = I)
MODEL = 22  # circle form: MODEL_SA, MODEL_USA
LN_ALPHA_LOC = 23  # PL_NGPT: location of nGPT's alpha (LOC_FLOATS)
LN_ALPHA_OFF = 24  # PL_NGPT: its offset
LN_SWITCH_OFF = 25  # PL_MIX: offset in floats of the switch time (Post-LN for t < switch, then Pre-LN)
STREAM_TILES = 26  # set by the compiled engine on its copy of ints: 0 the generic kernel, 1 the streamed
#                    kernel (_kernel_stream) on the calling thread, 2 its query tiles on numba's threads
N_INTS = 32

# --- values ---------------------------------------------------------------------------------
KIND_ATTENTION, KIND_CIRCLE = 0, 1
MAN_SPHERE, MAN_ELLIPSOID, MAN_FLAT = 0, 1, 2
MASK_FULL, MASK_CAUSAL = 0, 1
NORM_PAPER, NORM_SOFTMAX, NORM_MEAN = 0, 1, 2
LOC_FLOATS, LOC_PER = 0, 1
SRC_IDENTITY, SRC_CONST, SRC_SCALAR, SRC_SINES, SRC_STEPS, SRC_ROWSINES = 0, 1, 2, 3, 4, 5
MODEL_SA, MODEL_USA = 0, 1
PL_POST, PL_PRE, PL_PERI, PL_NGPT, PL_MIX = 0, 1, 2, 3, 4
#: operations of kernels.evaluate
OP_RHS, OP_UPDATE, OP_LIFTED_JAC, OP_TIME_DERIVATIVE, OP_BLOCK = 0, 1, 2, 3, 4
#: the field on the manifold in the difference form (riemattn.dynamics._tangent), for the stiff steps
OP_RHS_DIFF = 5

#: "mean": scores below this are exponentiated directly (exp(700) ~ 1e304 is finite); a row
#: with a larger score is shifted by its maximum, as in riemattn.dynamics._softmax.
MEAN_DIRECT_MAX = 700.0


def work_length(ints) -> int:
    """Length of the float64 scratch vector one kernel call needs for the pack ``ints``."""
    l, d, h = int(ints[L]), int(ints[D]), max(int(ints[H]), 1)
    if int(ints[KIND]) == KIND_CIRCLE:
        return 4 * l + 8
    # Pt, Ut, dPt, dUt (h d d each); p, q, u, fh, dfh (h l d each); A, dA (h l l);
    # f, Wy, Wf, yn, df, row (l d each); c (l) -- see _kernel_attention.offsets; then the
    # layer-norm placements' x (l d), r, |A| (l each) -- see _kernel_layernorm.ln_offsets
    return 4 * h * d * d + 5 * h * l * d + 2 * h * l * l + 7 * l * d + 3 * l
