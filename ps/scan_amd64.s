//go:build !purego

#include "textflag.h"

// func hitsAVX2(p *float32, n int, carry uint32) bool
TEXT ·hitsAVX2(SB), NOSPLIT, $0-25
	MOVQ         p+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0x7f800000, AX
	VMOVQ        AX, X13
	VPBROADCASTD X13, Y13
	MOVL         carry+16(FP), AX
	VMOVQ        AX, X14
	VPBROADCASTD X14, Y14
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	SHLQ         $2, CX
	XORQ         AX, AX

hitsLoop:
	CMPQ   AX, CX
	JGE    hitsDone
	VPAND  (SI)(AX*1), Y13, Y2
	VPAND  32(SI)(AX*1), Y13, Y3
	VPADDD Y14, Y2, Y2
	VPADDD Y14, Y3, Y3
	VPOR   Y2, Y0, Y0
	VPOR   Y3, Y1, Y1
	ADDQ   $64, AX
	JMP    hitsLoop

hitsDone:
	VPOR         Y1, Y0, Y0
	MOVL         $0x80000000, AX
	VMOVQ        AX, X15
	VPBROADCASTD X15, Y15
	VPTEST       Y15, Y0
	SETNE        ret+24(FP)
	VZEROUPPER
	RET
