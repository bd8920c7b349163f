"""The SASS parser of the proxy figures (riemattn.solvers.compiled.cuda._sass; no tool, no GPU)."""

from __future__ import annotations


SASS = """
\t.section\t.text.k,"ax",@progbits
k:
        /*0000*/                   LDG.E.64 R2, desc[UR4][R4.64] ;
.L_x_1:
        /*0010*/                   LDL.64 R6, [R1+0x8] ;
        /*0020*/              @!P0 BRA `(.L_x_2) ;
        /*0030*/                   STG.E.64 desc[UR4][R8.64], R6 ;
.L_x_2:
        /*0040*/                   CALL.REL.NOINC `($__internal_0_div) ;
        /*0050*/                   STL.64 [R1+0x8], R6 ;
        /*0060*/               @P1 BRA `(.L_x_1) ;
        /*0070*/                   STG.E.64 desc[UR4][R10.64], R2 ;
        /*0080*/                   EXIT ;
$__internal_0_div:
        /*0090*/                   DFMA R2, R2, R4, R6 ;
        /*00a0*/                   RET.REL.NODEC R20 `(k) ;
"""


def test_step_loop_is_the_largest_loop_of_the_sass():
    """The parser on a hand-written kernel: a loop (0x10-0x60, a save branch inside) between a load
    and a final store; the out-of-line subroutine is not part of the kernel's count."""
    from riemattn.solvers.compiled.cuda._sass import largest_loop

    c = largest_loop(SASS)
    assert c["instructions"] == 9 and c["loop"] == 6, c
    assert (c["LDL"], c["STL"], c["LDG"], c["STG"], c["calls"], c["STG_outside"]) == (1, 1, 0, 1, 1, 1), c
